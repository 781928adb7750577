// oneDNN plumbing shared by the float32 GEMM and convolution paths (see cpu_dnnl.h).
#include "cpu/cpu_dnnl.h"

#include <atomic>
#include <omp.h>

#include "mirror/error.h"

namespace mirror::cpu {
namespace {
std::atomic<std::int64_t> primitives_created{0};
}  // namespace

std::int64_t dnnl_primitives_created() { return primitives_created.load(); }
void note_dnnl_primitive_created() { primitives_created.fetch_add(1); }

std::string dnnl_thread_key() { return "t" + std::to_string(omp_get_max_threads()) + ":"; }

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine = [] {
    try {
      return dnnl::engine(dnnl::engine::kind::cpu, 0);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "creating the oneDNN CPU engine");
    }
  }();
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::primitive_attr dnnl_user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory dnnl_memory(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, dnnl_engine(), t.raw_data());
}

Tensor dnnl_scratchpad(const dnnl::memory::desc& md, Device device) {
  const std::size_t bytes = md.get_size();
  if (bytes == 0) return Tensor();
  return Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::kUInt8, device);
}

namespace {
DnnlBoundary make_boundary(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                           const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                           bool accumulate) {
  DnnlBoundary b{plain, chosen, {}, {}};
  if (plain == chosen && !accumulate) return b;
  dnnl::primitive_attr attr = dnnl_user_scratchpad_attr();
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);  // to = from + to, rounded once: the same as a float '+='
    attr.set_post_ops(ops);
  }
  dnnl::reorder::primitive_desc pd(dnnl_engine(), from, dnnl_engine(), to, attr);
  b.reorder = dnnl::reorder(pd);
  b.reorder_scratch = pd.scratchpad_desc();
  return b;
}
}  // namespace

DnnlBoundary dnnl_input_boundary(const dnnl::memory::desc& plain,
                                 const dnnl::memory::desc& chosen) {
  return make_boundary(plain, chosen, plain, chosen, false);
}

DnnlBoundary dnnl_output_boundary(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                                  bool accumulate) {
  return make_boundary(plain, chosen, chosen, plain, accumulate);
}

dnnl::memory DnnlRun::buffer(const dnnl::memory::desc& md) {
  const std::size_t bytes = md.get_size();
  if (bytes == 0) return dnnl::memory(md, dnnl_engine(), nullptr);
  keep_.push_back(Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::kUInt8, device_));
  return dnnl::memory(md, dnnl_engine(), keep_.back().raw_data());
}

void DnnlRun::run(const dnnl::primitive& prim, const dnnl::memory::desc& scratch_md,
                  std::unordered_map<int, dnnl::memory> args) {
  if (scratch_md.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = buffer(scratch_md);
  prim.execute(dnnl_stream(), args);
}

void DnnlRun::input(int arg, const DnnlBoundary& b, const Tensor& t) {
  dnnl::memory user = dnnl_memory(b.plain, t);
  if (!b.reorders()) {
    args_[arg] = user;
    return;
  }
  dnnl::memory chosen = buffer(b.chosen);
  run(b.reorder, b.reorder_scratch, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, chosen}});
  args_[arg] = chosen;
}

void DnnlRun::output(int arg, const DnnlBoundary& b, const Tensor& t) {
  dnnl::memory user = dnnl_memory(b.plain, t);
  if (!b.reorders()) {
    args_[arg] = user;
    return;
  }
  dnnl::memory chosen = buffer(b.chosen);
  args_[arg] = chosen;
  outputs_.push_back({&b, chosen, user});
}

void DnnlRun::execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratch_md) {
  run(prim, scratch_md, args_);
  for (const PendingOutput& o : outputs_) {
    run(o.boundary->reorder, o.boundary->reorder_scratch,
        {{DNNL_ARG_FROM, o.from}, {DNNL_ARG_TO, o.to}});
  }
  dnnl_stream().wait();
}

void DnnlRun::reorder(const DnnlBoundary& b, const Tensor& from, const Tensor& to) {
  MIRROR_CHECK(b.reorders(), Error, "DnnlRun::reorder: the boundary has no reorder");
  run(b.reorder, b.reorder_scratch,
      {{DNNL_ARG_FROM, dnnl_memory(b.plain, from)}, {DNNL_ARG_TO, dnnl_memory(b.chosen, to)}});
  dnnl_stream().wait();
}

void rethrow_dnnl(const dnnl::error& e, const std::string& what) {
  throw Error(what + ": oneDNN reported '" + e.what() + "' (status " +
              std::to_string(static_cast<int>(e.status)) +
              "); check the shapes, or run with ONEDNN_VERBOSE=1 for details");
}

}  // namespace mirror::cpu
