// The programs' stray-argument rule (tools/command_line.h).
#include "tools/command_line.h"

#include <string>
#include <vector>

namespace mirror::tools {

void reject_stray_arguments(const boost::program_options::parsed_options& parsed) {
  namespace po = boost::program_options;
  const std::vector<std::string> stray = po::collect_unrecognized(parsed.options, po::include_positional);
  if (stray.empty()) return;
  throw po::error("unexpected argument '" + stray.front() +
                  "': options are --name or --name VALUE, and a switch (such as --force-lr or "
                  "--no-progress) takes no value");
}

}  // namespace mirror::tools
