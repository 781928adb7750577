// mirror-train's command line (Note [One command line], train_flags.h): the options table and
// the flags -> TrainConfig mapping, used by examples/mirror_train.cpp and python/.
#include "tools/train_flags.h"

#include <boost/program_options.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mirror/error.h"
#include "mirror/json_input.h"
#include "tools/command_line.h"

namespace mirror::train {
namespace {

namespace po = boost::program_options;

po::options_description make_options() {
  po::options_description o("mirror-train options (flags override --config)");
  // No defaults here: a flag given on the command line overrides the config file, an absent
  // flag keeps the config's (or TrainConfig's) value.
  o.add_options()("help,h", "show this help")(
      "config", po::value<std::string>(),
      "JSON file with any of the options below (keys as flag names)")(
      "model", po::value<std::string>(),
      "built-in model: cnn | cnn-stride2 | resnet | inception | gru-rows | lstm-rows | gru-words | "
      "bigru-words | conv1d-words (default "
      "cnn)")(
      "model-spec", po::value<std::string>(),
      "model spec JSON file (a Sequential layer list, Mirror or Keras names); replaces --model")(
      "init-weights", po::value<std::string>(),
      "start from these weights: a Keras .weights.h5 of the same model (fine-tuning)")(
      "loss", po::value<std::string>(),
      "auto | softmax-cross-entropy | binary-cross-entropy | mse (default auto: softmax "
      "cross-entropy for class labels, mse for float targets)")(
      "train-x", po::value<std::string>(),
      "training inputs: .npy or IDX file (.gz accepted), [N, ...] floats/uint8 or int token ids")(
      "train-y", po::value<std::string>(),
      "training targets: .npy or IDX, integer [N] class labels or float [N] / [N, K] targets")(
      "test-x", po::value<std::string>(), "test inputs (as --train-x)")(
      "test-y", po::value<std::string>(), "test targets (as --train-y)")(
      "train-csv", po::value<std::string>(), "training data as CSV: numeric columns and a label")(
      "test-csv", po::value<std::string>(), "test data as CSV")(
      "label-column", po::value<std::string>(),
      "CSV label column: name or 0-based index (default: the last column)")(
      "csv-header", po::value<std::string>(), "auto | yes | no: whether the CSV has a header row")(
      "train-tokens", po::value<std::string>(),
      "training token text: one sequence per line, \"label id id ...\" (ids >= 1)")(
      "test-tokens", po::value<std::string>(), "test token text")(
      "num-classes", po::value<int>(), "classes of the data files (default: max label + 1)")(
      "input-shape", po::value<std::string>(),
      "reshape each array sample, e.g. 1,28,28 (default: as stored)")(
      "train-images", po::value<std::string>(),
      "training images: a folder with one subfolder of JPEG/PNG files per class, or tar shards "
      "in WebDataset's layout (a .tar, a folder of them or a quoted glob)")(
      "test-images", po::value<std::string>(), "test images (as --train-images, same classes)")(
      "image-size", po::value<std::string>(),
      "resize images to HEIGHT,WIDTH (default: the first image's size)")(
      "color", po::value<std::string>(),
      "auto | grayscale | rgb: image channels (default auto: the first image's mode)")(
      "decode", po::value<std::string>(), "cpu | gpu: where JPEGs are decoded (gpu: nvJPEG)")(
      "crop", po::value<std::string>(),
      "training crop of image folders: none | random-resized[=MIN,MAX] (torchvision's "
      "RandomResizedCrop: area scale MIN..MAX, default 0.08,1, aspect 3/4..4/3, resized to "
      "--image-size)")(
      "flip", "mirror half the training images left-right (after the crop)")(
      "normalize", po::value<std::string>(),
      "none | imagenet | MEAN,STD or C means then C stds: (x - mean) / std per channel on "
      "[0, 1] pixels, both splits")(
      "eval-resize", po::value<int>(),
      "test images: resize the short side to N pixels, then centre-crop to --image-size")(
      "eval-crop", po::value<int>(), "the centre crop after --eval-resize (= --image-size)")(
      "data-workers", po::value<int>(),
      "threads of this rank that decode samples ahead of the step, shared by its local "
      "replicas (default: the rank's cores on its host, at most 64)")(
      "skip-bad-samples",
      "replace a sample that cannot be decoded by the next good one, and count them")(
      "data", po::value<std::string>(), "built-in data: real | synthetic (default real)")(
      "data-dir", po::value<std::string>(),
      "Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist)")(
      "dict-dir", po::value<std::string>(), "word-list folder (default /usr/share/dict)")(
      "train-limit", po::value<std::int64_t>(),
      "use N training samples drawn at random (seeded by --seed)")(
      "test-limit", po::value<std::int64_t>(), "use N test samples drawn at random")(
      "epochs", po::value<int>(), "epochs (default 1)")("max-steps", po::value<std::int64_t>(),
                                                        "stop after N steps")(
      "batch-size", po::value<std::int64_t>(), "global batch size (default 64)")(
      "batch-per-replica", po::value<std::int64_t>(),
      "batch per replica (global = this x replicas)")("optimizer", po::value<std::string>(),
                                                      "sgd | adam | adamw (default adam)")(
      "lr", po::value<double>(), "learning rate (default 0.001)")("force-lr",
                                                                  "accept an --lr above 10")(
      "lr-scale", po::value<std::string>(),
      "none | linear: multiply --lr by the number of replicas")(
      "schedule", po::value<std::string>(), "constant | warmup | cosine")(
      "warmup-steps", po::value<std::int64_t>(), "linear warm-up steps")(
      "momentum", po::value<double>(), "SGD momentum (default 0.9)")(
      "weight-decay", po::value<double>(), "weight decay")(
      "seed", po::value<std::string>(),
      "seed of initialisation, data order and dropout: 0 to 2^64-1 (default 0)")(
      "devices", po::value<std::string>(), "auto | gpu | gpu:0,gpu:1 | cpu | cpu:N (default auto)")(
      "memory", po::value<std::string>(),
      "growth | preallocate=FRACTION | limit=BYTES (default growth)")(
      "require-gpu", "fail instead of falling back to the CPU")(
      "augment", po::value<std::string>(),
      "random crops and flips of the training images: none | crop=P,flip (e.g. crop=4,flip: "
      "shift by up to 4 pixels and mirror half the images; evaluation is not augmented)")(
      "sync-batchnorm",
      "synchronize every BatchNormalization across replicas (statistics of the global batch)")(
      "allow-gpu-sharing", "let several local ranks share a GPU")(
      "threads", po::value<int>(), "CPU threads per rank (default: cores / local ranks)")(
      "comm-timeout", po::value<double>(),
      "seconds a collective may take before the job aborts (default 600)")(
      "startup-timeout", po::value<double>(),
      "seconds MPI start-up may take before this rank gives up (default 120; 0 = wait forever)")(
      "bucket-mb", po::value<double>(), "gradient bucket cap in MiB (default 25)")(
      "first-bucket-mb", po::value<double>(), "first bucket cap in MiB (default 1)")(
      "compression", po::value<std::string>(), "all-reduce payload: none | fp16 | bf16")(
      "comm", po::value<std::string>(),
      "GPU replicas' transport: auto | nccl | mpi (MPI over pinned host copies: no NCCL needed, "
      "several ranks may share a GPU; docs/gpu-kit.md)")(
      "precision", po::value<std::string>(),
      "float32 | mixed_bfloat16 | mixed_float16: compute of convolution, dense and RNN products "
      "(master weights stay float32; default float32)")(
      "data-format", po::value<std::string>(),
      "auto | channels_last | channels_first: how image arrays are laid out (auto: a Keras "
      "model's [H, W, C] samples as Keras reads them, else [C, H, W]; recorded for "
      "mirror-predict)")(
      "tf32", po::value<std::string>(),
      "on | off: float32 convolutions and matrix products on a GPU's TF32 tensor cores (Ampere "
      "and newer; default on, as TensorFlow); off: exact float32")(
      "accumulation", po::value<int>(), "micro-batches per step (gradient accumulation)")(
      "on-oom", po::value<std::string>(),
      "split | fail: on out-of-memory, retry with micro-batches (default split)")(
      "divergence-check-every", po::value<int>(),
      "compare replica weights every K steps (0 = never)")(
      "max-skipped-steps", po::value<int>(),
      "stop the run (exit code 1) after K steps in a row skipped for non-finite gradients "
      "(default 10; 0 = never)")(
      "checkpoint-dir", po::value<std::string>(),
      "write checkpoints here (rank 0; default when resuming: the --resume folder)")(
      "checkpoint-every", po::value<std::int64_t>(),
      "checkpoint every N steps (default: each epoch)")("keep", po::value<int>(),
                                                        "checkpoints kept (default 3; 0 = all)")(
      "resume", po::value<std::string>(), "resume from the newest valid checkpoint in this folder")(
      "resume-or-start", po::value<std::string>(),
      "like --resume, but start fresh when the folder holds no valid checkpoint")(
      "allow-config-change", "resume with another seed, optimizer, lr or global batch (warns)")(
      "overwrite-checkpoints", "a fresh run deletes the checkpoints already in --checkpoint-dir")(
      "log-jsonl", po::value<std::string>(), "write per-step and per-epoch metrics as JSON lines")(
      "overwrite",
      "let --log-jsonl and --trace replace an existing file (--resume appends to them)")(
      "tensorboard", po::value<std::string>(), "write TensorBoard scalar summaries into DIR")(
      "trace", po::value<std::string>(), "write a Chrome trace (all ranks merged)")(
      "no-progress", "no progress bar")(
      "debug", "error messages end with the source location that raised them (or MIRROR_DEBUG=1)");
  return o;
}

TrainConfig config_from(const po::variables_map& vm) {
  TrainConfig c;
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    std::error_code ec;
    MIRROR_CHECK(!std::filesystem::is_directory(path, ec), InvalidArgument,
                 "--config " + path + " is a directory; give a JSON file");
    errno = 0;
    std::ifstream in(path);
    MIRROR_CHECK(in.good(), InvalidArgument,
                 "cannot read --config " + path + ": " + std::strerror(errno));
    c = TrainConfig::from_json(parse_json_input(in, "--config " + path));
  }
  auto set = [&vm](const char* flag, auto& field) {
    using T = std::decay_t<decltype(field)>;
    if (vm.count(flag)) field = vm[flag].as<T>();
  };
  set("model", c.model);
  set("model-spec", c.model_spec);
  set("init-weights", c.init_weights);
  set("loss", c.loss);
  set("train-x", c.train_x);
  set("train-y", c.train_y);
  set("test-x", c.test_x);
  set("test-y", c.test_y);
  set("train-csv", c.train_csv);
  set("test-csv", c.test_csv);
  set("label-column", c.label_column);
  set("csv-header", c.csv_header);
  set("train-tokens", c.train_tokens);
  set("test-tokens", c.test_tokens);
  set("num-classes", c.num_classes);
  set("input-shape", c.input_shape);
  set("train-images", c.train_images);
  set("test-images", c.test_images);
  set("image-size", c.image_size);
  set("color", c.color);
  set("decode", c.decode);
  set("data-workers", c.data_workers);
  set("crop", c.crop);
  if (vm.count("flip")) c.flip = true;
  set("normalize", c.normalize);
  set("eval-resize", c.eval_resize);
  set("eval-crop", c.eval_crop);
  if (vm.count("skip-bad-samples")) c.skip_bad_samples = true;
  set("data", c.data);
  set("data-dir", c.data_dir);
  set("dict-dir", c.dict_dir);
  set("train-limit", c.train_limit);
  set("test-limit", c.test_limit);
  set("epochs", c.epochs);
  set("max-steps", c.max_steps);
  set("batch-size", c.batch_size);
  set("batch-per-replica", c.batch_per_replica);
  set("optimizer", c.optimizer);
  set("lr", c.lr);
  set("schedule", c.schedule);
  set("warmup-steps", c.warmup_steps);
  set("momentum", c.momentum);
  set("weight-decay", c.weight_decay);
  if (vm.count("seed")) c.seed = parse_seed(vm["seed"].as<std::string>());
  set("devices", c.devices);
  set("memory", c.memory);
  set("threads", c.threads);
  set("comm-timeout", c.comm_timeout_s);
  set("startup-timeout", c.startup_timeout_s);
  set("bucket-mb", c.bucket_mb);
  set("first-bucket-mb", c.first_bucket_mb);
  set("compression", c.compression);
  set("comm", c.comm);
  set("precision", c.precision);
  set("tf32", c.tf32);
  set("data-format", c.data_format);
  set("augment", c.augment);
  set("accumulation", c.accumulation);
  set("divergence-check-every", c.divergence_check_every);
  set("max-skipped-steps", c.max_skipped_steps);
  set("checkpoint-dir", c.checkpoint_dir);
  set("checkpoint-every", c.checkpoint_every);
  set("keep", c.keep);
  set("resume", c.resume);
  if (vm.count("resume-or-start")) {
    MIRROR_CHECK(!vm.count("resume"), InvalidArgument,
                 "give --resume or --resume-or-start, not both");
    c.resume = vm["resume-or-start"].as<std::string>();
    c.resume_or_start = true;
  }
  if (vm.count("allow-config-change")) c.allow_config_change = true;
  if (vm.count("overwrite-checkpoints")) c.overwrite_checkpoints = true;
  set("log-jsonl", c.log_jsonl);
  set("trace", c.trace);
  set("tensorboard", c.tensorboard);
  if (vm.count("overwrite")) c.overwrite = true;
  if (vm.count("batch-size")) check_batch_flag("batch-size", c.batch_size);
  if (vm.count("batch-per-replica")) check_batch_flag("batch-per-replica", c.batch_per_replica);
  if (vm.count("weight-decay")) check_weight_decay_flag(c.weight_decay);
  if (vm.count("force-lr")) c.force_lr = true;
  if (vm.count("require-gpu")) c.require_gpu = true;
  if (vm.count("sync-batchnorm")) c.sync_batchnorm = true;
  if (vm.count("allow-gpu-sharing")) c.allow_gpu_sharing = true;
  if (vm.count("no-progress")) c.progress = false;
  if (vm.count("lr-scale")) {
    const auto v = vm["lr-scale"].as<std::string>();
    MIRROR_CHECK(v == "none" || v == "linear", InvalidArgument,
                 "--lr-scale must be none or linear, got '" + v + "'");
    c.lr_scale_by_replicas = v == "linear";
  }
  if (vm.count("on-oom")) {
    const auto v = vm["on-oom"].as<std::string>();
    MIRROR_CHECK(v == "split" || v == "fail", InvalidArgument,
                 "--on-oom must be split or fail, got '" + v + "'");
    c.on_oom_split = v == "split";
  }
  c.validate();
  return c;
}

}  // namespace

TrainFlags parse_train_flags(const std::vector<std::string>& args) {
  const auto options = make_options();
  po::variables_map vm;
  TrainFlags out;
  try {
    // No prefix matching: `--epoch 2` must not quietly mean `--epochs 2`.
    namespace style = po::command_line_style;
    const po::parsed_options parsed = po::command_line_parser(args)
                                          .options(options)
                                          .style(style::default_style & ~style::allow_guessing)
                                          .run();
    tools::reject_stray_arguments(parsed);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(e.what());
  }
  out.debug = vm.count("debug") > 0;
  if (out.debug) set_debug_messages(true);  // before the checks, so their messages show it
  out.help = vm.count("help") > 0;
  if (!out.help) out.config = config_from(vm);
  return out;
}

std::vector<std::string> train_flag_switches() {
  std::vector<std::string> out;
  const auto options = make_options();
  for (const auto& option : options.options()) {
    if (option->semantic()->max_tokens() == 0) out.push_back(option->long_name());
  }
  return out;
}

std::string train_flags_help() {
  std::ostringstream out;
  out << make_options();
  return out.str();
}

}  // namespace mirror::train
