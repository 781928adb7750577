// defines: the start-up checks of the output paths (--checkpoint-dir, --trace, --tensorboard),
// Note [Telemetry failures] (trainer_observers.cpp).
#pragma once

#include <string>

namespace mirror::train {

/// Creates and deletes a small file in `dir`: InvalidArgument naming `flag`, the folder and the
/// system's reason (read-only, permission, disk full) when that fails.
void check_writable_dir(const std::string& dir, const std::string& flag);
/// Opens `path` for appending (creating it and its folder when missing, deleting it again) and
/// writes nothing: InvalidArgument naming `flag`, the path and the system's reason on failure.
void check_writable_file(const std::string& path, const std::string& flag);

}  // namespace mirror::train
