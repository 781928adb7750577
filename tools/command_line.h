// defines: the programs' shared command-line rule that Boost.Program_options does not apply
// itself: an argument that belongs to no option is an error, not silently dropped.
#pragma once

#include <boost/program_options.hpp>

namespace mirror::tools {

/// Throws boost::program_options::error naming the first argument of `parsed` that belongs to
/// no option (`--force-lr yes`: a switch takes no value, and Boost keeps `yes` as a positional
/// argument that nobody reads), so every program reports it as it reports an unknown flag.
void reject_stray_arguments(const boost::program_options::parsed_options& parsed);

}  // namespace mirror::tools
