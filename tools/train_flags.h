// defines: mirror-train's command line, shared by the program and the Python module (whose
// fit() keywords are these flags, Note [One command line]): the options, their --help text,
// and their parsing into a TrainConfig with the program's checks and messages.
#pragma once

#include <string>
#include <vector>

#include "mirror/train/trainer.h"

namespace mirror::train {

/// Note [One command line]: mirror-train's flags are parsed here and only here. The program
/// gives its argv; the Python module turns each fit() keyword into the flag of the same name
/// (`batch_size=64` -> `--batch-size 64`, `force_lr=True` -> `--force-lr`), so both accept the
/// same options, apply the same checks and say the same messages.
struct TrainFlags {
  TrainConfig config;  // validated (TrainConfig::validate)
  bool help = false;   // --help: nothing else was parsed
  bool debug = false;  // --debug (already applied: set_debug_messages(true))
};

/// Parses mirror-train's flags (without the program name): no abbreviations (`--epoch` is
/// unknown), flags override --config FILE.json. InvalidArgument with the parser's or the
/// check's message (e.g. "unrecognised option '--epoch'", "--epochs must be >= 1, got 0").
TrainFlags parse_train_flags(const std::vector<std::string>& args);

/// The options with their descriptions, as --help prints them.
std::string train_flags_help();
/// The flags that take no value (`force-lr`, `no-progress`, ...), without the dashes.
std::vector<std::string> train_flag_switches();

}  // namespace mirror::train
