// Finding targets in a /proc tree of the test's own: an unreadable entry is a refused target,
// an exited process (gone, or a zombie not reaped yet) is none.
#include "agent/capture/target_discovery.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace stormwatch {
namespace {

class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("stormwatch-proc-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Process(int pid, const std::string& comm, const std::string& stat, const std::string& exe) {
    auto dir = root_ / std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "comm") << comm << "\n";
    if (!stat.empty()) std::ofstream(dir / "stat") << stat << "\n";
    if (!exe.empty()) std::filesystem::create_symlink(exe, dir / "exe");
  }
  static std::string Stat(int pid, const std::string& comm, char state) {
    // pid (comm) state ppid ... field 22 = start time.
    std::string s = std::to_string(pid) + " (" + comm + ") " + state;
    for (int field = 4; field <= 21; ++field) s += " 0";
    return s + " 4242 0 0";
  }

  std::filesystem::path root_;
};

TEST_F(FakeProc, ReadableTargetIsFoundWithItsIdentity) {
  Process(100, "kube-apiserver", Stat(100, "kube-apiserver", 'S'), "/usr/bin/kube-apiserver");
  auto found = FindTargetsByName({"kube-apiserver", "etcd"}, root_.string());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 100);
  EXPECT_EQ(found[0].name, "kube-apiserver");
  EXPECT_EQ(found[0].start_time, 4242u);
  EXPECT_EQ(found[0].unreadable, "");
}

TEST_F(FakeProc, UnreadableStatIsAFoundTargetThatSaysWhy) {
  // A long name: comm holds its first 15 bytes, which is all there is to go by.
  Process(200, "kube-apiserver-", "", "");
  auto found = FindTargetsByName({"etcd", "kube-apiserver-long-name"}, root_.string());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 200);
  EXPECT_EQ(found[0].name, "kube-apiserver-long-name");
  EXPECT_EQ(found[0].unreadable, "cannot read " + (root_ / "200").string() + "/stat: No such file or directory");
}

TEST_F(FakeProc, ZombieIsGone) {
  Process(300, "etcd", Stat(300, "etcd", 'Z'), "");
  EXPECT_TRUE(FindTargetsByName({"etcd"}, root_.string()).empty());
  TargetProcess t;
  EXPECT_FALSE(ReadTargetProcess(300, &t, root_.string()));
}

TEST_F(FakeProc, ProcessGoneBetweenScanAndReadIsNoTarget) {
  TargetProcess t;
  EXPECT_FALSE(ReadTargetProcess(400, &t, root_.string()));
}

}  // namespace
}  // namespace stormwatch
