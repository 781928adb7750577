// Note [Checkpoint folder lock]: one owner at a time, a lock that dies with its process, and a
// dead owner's lock taken over and named.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "mirror/error.h"
#include "mirror/train/checkpoint_lock.h"

namespace mirror::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mirror_lock_" + name + "_" +
                                                    std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string lock_text(const fs::path& dir) {
  std::ifstream in(dir / CheckpointDirLock::kFileName);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST(CheckpointDirLock, ASecondOwnerIsRefusedWithTheFirstOwnersName) {
  const fs::path dir = fresh_dir("second");
  {
    CheckpointDirLock first(dir);
    EXPECT_TRUE(first.recovered().empty());
    const std::string me = "pid " + std::to_string(::getpid()) + " on host ";
    EXPECT_EQ(lock_text(dir).rfind(me, 0), 0u) << lock_text(dir);
    try {
      CheckpointDirLock second(dir);
      FAIL() << "a second lock of the same folder was granted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("is in use by another run (" + me), std::string::npos) << what;
      EXPECT_NE(what.find(dir.string()), std::string::npos) << what;
    }
  }
  // Released: the next owner finds no stale name (a clean end empties the file).
  EXPECT_EQ(lock_text(dir), "");
  CheckpointDirLock again(dir);
  EXPECT_TRUE(again.recovered().empty());
  fs::remove_all(dir);
}

TEST(CheckpointDirLock, TheLockDiesWithItsProcessAndIsTakenOverByName) {
  const fs::path dir = fresh_dir("dies");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CheckpointDirLock held(dir);
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    for (;;) ::pause();  // until SIGKILL: no destructor runs
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  const std::string owner = "pid " + std::to_string(child) + " on host ";
  EXPECT_THROW(CheckpointDirLock refused(dir), InvalidArgument);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CheckpointDirLock after(dir);  // the kernel released the dead process's lock
  EXPECT_EQ(after.recovered().rfind(owner, 0), 0u) << after.recovered();
  ::close(ready[0]);
  ::close(ready[1]);
  fs::remove_all(dir);
}

TEST(CheckpointDirLock, AMissingFolderIsAnErrorNamingIt) {
  const fs::path dir = fs::temp_directory_path() / "mirror_lock_no_such_folder" / "x";
  try {
    CheckpointDirLock lock(dir);
    FAIL() << "locked a folder that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mirror::train
