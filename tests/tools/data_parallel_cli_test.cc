// Data-parallel `ampc train` (docs/distributed.md) as people launch it: `--nproc 2`, and two
// processes started with torchrun's variables. The example MLP (a model of 8 rows per batch) on
// 2 ranks with global batches of 16 rows trains like one rank accumulating the same two 8-row
// halves (`ampc compile --accumulate 2`, the definition of the mean gradient over 16 rows): the
// same losses within f32 rounding. A resume with the same ranks is bit-identical; a rank killed
// mid-run makes the launcher exit non-zero naming it, and the run resumes bit-identically.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <thread>

#include "compiler/onnx_io.h"
#include "runtime/safetensors.h"
#include "tests/runtime/comm/comm_test_util.h"
#include "tests/tools/train_cli_test_util.h"

namespace ampc::train_cli {
namespace {

using ::testing::Not;

class DataParallelCliTest : public TrainCliTest {
 protected:
  // The first `ranks` * n batches of models/<example>.train.npz as n global batches for `ranks`
  // ranks (global batch i is batches ranks * i ... ranks * i + ranks - 1), saved as `file`.
  std::string regrouped(const std::string& example, int64_t ranks, int64_t n,
                        const std::string& file) const {
    absl::StatusOr<std::map<std::string, Tensor>> all =
        runtime::read_npz(data(example + ".train.npz"));
    EXPECT_TRUE(all.ok());
    std::map<std::string, Tensor> global;
    for (const auto& [name, array] : *all) {
      Tensor cut = first_batches(array, ranks * n);
      TensorType type = cut.type();
      type.shape[0] = n;
      type.shape[1] *= ranks;
      global.emplace(name,
                     Tensor(type, std::vector<uint8_t>(cut.bytes().begin(), cut.bytes().end())));
    }
    save_npz(file, global);
    return path(file);
  }

  // models/mlp.train.npz's first 2n batches of 8 rows as n global batches of 16 rows (and, in
  // halves.npz, as the 2n batches): global batch i is batches 2i and 2i + 1, which is what
  // --accumulate 2 reads for step i.
  std::string global_batches(int64_t n) const {
    regrouped("mlp", 1, 2 * n, "halves.npz");
    return regrouped("mlp", 2, n, "global.npz");
  }

  void expect_same_losses(const std::string& a, const std::string& b, size_t steps) const {
    const std::vector<LogLine> la = read_log(a), lb = read_log(b);
    ASSERT_EQ(la.size(), steps);
    ASSERT_EQ(lb.size(), steps);
    for (size_t i = 0; i < steps; ++i) {
      EXPECT_NEAR(la[i].loss, lb[i].loss, 1e-5 * std::abs(lb[i].loss)) << "step " << i + 1;
      EXPECT_NEAR(la[i].grad_norm, lb[i].grad_norm, 1e-5 * lb[i].grad_norm) << "step " << i + 1;
    }
  }
};

TEST_F(DataParallelCliTest, TwoLocalRanksTrainLikeAccumulatingTheirHalves) {
  const std::string ranks_model = compile("mlp", "--optimizer sgd --momentum 0.9 --lr 0.05");
  const std::string global = global_batches(4);
  const std::string eval = " --eval-data " + data("mlp.eval.npz");
  CliResult ranks = train(ranks_model, "--nproc 2 --data " + global + " --steps 8 --log " +
                                           path("ranks.jsonl") + " --checkpoint " + path("ckpt") +
                                           " --export " + path("trained.onnx") + eval);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;
  EXPECT_TRUE(fs::exists(path("ckpt/checkpoint.safetensors")));
  EXPECT_TRUE(fs::exists(path("trained.onnx")));

  const std::string out = path("accumulating.train.onnx");
  CliResult one = testing::run_ampc("compile " + model("mlp") + " -o " + out +
                                    " --optimizer sgd --momentum 0.9 --lr 0.05 --accumulate 2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  one = train(out, "--data " + path("halves.npz") + " --steps 8 --log " + path("one.jsonl") + eval);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  expect_same_losses(path("ranks.jsonl"), path("one.jsonl"), 8);

  // --eval-data: the ranks share the 24 held-out batches and rank 0 reports the sums of all of
  // them, once: the loss and accuracy the single rank reports for its (nearly equal) weights.
  const std::regex loss(R"(ampc: eval loss ([0-9.e+-]+) \(mean over 24 batches)");
  const std::regex accuracy(R"(eval accuracy of logits [0-9.]+ \(([0-9]+) of 192\))");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(ranks.err, a, loss)) << ranks.err;
  ASSERT_TRUE(std::regex_search(one.err, b, loss)) << one.err;
  EXPECT_NEAR(std::stod(a[1]), std::stod(b[1]), 1e-4 * std::stod(b[1]));
  const std::string hits = std::regex_search(one.err, b, accuracy) ? b[1].str() : "none";
  ASSERT_TRUE(std::regex_search(ranks.err, a, accuracy)) << ranks.err;
  EXPECT_EQ(a[1].str(), hits);
  EXPECT_EQ(ranks.err.find("ampc: eval loss"), ranks.err.rfind("ampc: eval loss")) << ranks.err;
}

// --shard-optimizer: 2 ranks train like the unsharded 2 ranks; their checkpoint after 4 steps
// holds the whole moments, and 4 ranks (global batches of 32 rows: models of 8) resume it.
TEST_F(DataParallelCliTest, AShardedOptimizerTrainsLikeTheUnshardedOneAndResumesOnFourRanks) {
  const std::string ranks_model = compile("mlp", "--optimizer adamw --lr 0.01");
  const std::string global = global_batches(4);
  CliResult r =
      train(ranks_model, "--nproc 2 --data " + global + " --steps 8 --log " + path("plain.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(ranks_model, "--nproc 2 --shard-optimizer --data " + global + " --steps 8 --log " +
                             path("sharded.jsonl") + " --checkpoint " + path("ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_losses(path("sharded.jsonl"), path("plain.jsonl"), 8);

  // Global batches of 32 rows for 4 ranks.
  r = train(ranks_model, "--nproc 4 --shard-optimizer --data " +
                             regrouped("mlp", 4, 2, "four.npz") +
                             " --steps 10 --resume --checkpoint " + path("ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("after step 8"));
}

// At fp16, --shard-optimizer also shards the master weights the forward reads in f16: the 2
// ranks log the unsharded ranks' losses exactly, and every rank takes part in --export (the
// weights are gathered) while rank 0 writes the unsharded ranks' weights, bit for bit.
TEST_F(DataParallelCliTest, ShardedMasterWeightsExportTheUnshardedModel) {
  const std::string ranks_model = compile("mlp", "--precision fp16 --optimizer adamw --lr 0.01");
  const std::string global = global_batches(3);
  for (const std::string run : {"plain", "sharded"}) {
    CliResult r = train(ranks_model, "--nproc 2 --data " + global + " --steps 6 --log " +
                                         path(run + ".jsonl") + " --export " + path(run + ".onnx") +
                                         (run == "sharded" ? " --shard-optimizer" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("wrote the trained inference model"),
              r.err.rfind("wrote the trained inference model"))
        << r.err;
  }
  const std::vector<LogLine> plain = read_log(path("plain.jsonl"));
  const std::vector<LogLine> sharded = read_log(path("sharded.jsonl"));
  ASSERT_EQ(sharded.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(sharded[i].loss, plain[i].loss) << i + 1;
  absl::StatusOr<std::unique_ptr<Graph>> a = import_onnx_file(path("sharded.onnx"));
  absl::StatusOr<std::unique_ptr<Graph>> b = import_onnx_file(path("plain.onnx"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*a)->initializers().size(), (*b)->initializers().size());
  for (const Value* x : (*b)->initializers()) {
    const Value* y = nullptr;
    for (const Value* init : (*a)->initializers()) {
      if (init->name() == x->name()) y = init;
    }
    ASSERT_NE(y, nullptr) << x->name();
    EXPECT_EQ(y->type(), x->type()) << x->name();
    EXPECT_TRUE(std::ranges::equal(y->initializer()->bytes(), x->initializer()->bytes()))
        << x->name();
  }
}

TEST_F(DataParallelCliTest, LocalBatchNormWithOneRankIsAnError) {
  const std::string trained = compile("cnn", "--optimizer sgd --lr 0.05");
  CliResult r = train(trained, "--data " + data("cnn.train.npz") + " --steps 1 --local-batch-norm");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--local-batch-norm applies to data-parallel training only"));
}

// --nproc is an int64 on the command line and a number of processes here: a value past the
// machine's bound (4 ranks per online CPU) is a range error naming the flag, whatever its size,
// and starts no process. Values that once overflowed the int cast (an abort, a silent exit 0,
// training on 2 ranks) are among them; 4 ranks stay allowed on any machine.
TEST_F(DataParallelCliTest, NprocPastTheMachinesBoundIsARangeError) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.05");
  const std::string past_bound = std::to_string(4 * sysconf(_SC_NPROCESSORS_ONLN) + 1);
  for (const std::string& nproc : {std::string("2147483648"), std::string("4294967296"),
                                   std::string("4294967298"), past_bound}) {
    const std::string err = expect_train_error(
        trained, "--nproc " + nproc + " --data " + global_batches(1) + " --steps 1");
    EXPECT_THAT(err, HasSubstr("ampc: error: --nproc " + nproc + " is out of range: at most "))
        << nproc;
    EXPECT_THAT(err, HasSubstr(" per online CPU")) << nproc;
    EXPECT_THAT(err, Not(HasSubstr("rank 0"))) << nproc;
  }
  CliResult r =
      train(trained, "--nproc 4 --data " + regrouped("mlp", 4, 1, "four.npz") + " --steps 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// What every rank would find alike (an unreadable model or data, data of the wrong shape, a
// path that cannot be written, a flag that does nothing) is found once, by the launcher before
// any rank starts: one message, no line about a rank.
TEST_F(DataParallelCliTest, AnErrorEveryRankWouldMeetIsPrintedOnceBeforeAnyRankStarts) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.05");
  const std::string global = " --data " + regrouped("mlp", 3, 1, "three.npz") + " --steps 1";
  const struct {
    std::string model;
    std::string args;
    std::string message;
  } cases[] = {
      {path("nope.onnx"), global, "cannot read '" + path("nope.onnx") + "'"},
      {trained, " --data " + path("nope.npz") + " --steps 1", path("nope.npz")},
      {trained, " --data " + data("mlp.train.npz") + " --steps 1", "must be f32[N,24,64]"},
      {trained, global + " --log " + path("no/such/folder/log.jsonl"),
       "cannot write --log '" + path("no/such/folder/log.jsonl") + "'"},
      {trained, global + " --local-batch-norm", "--local-batch-norm does nothing: "},
  };
  for (const auto& c : cases) {
    CliResult r = train(c.model, "--nproc 3" + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.err;
    const size_t first = r.err.find(c.message);
    EXPECT_NE(first, std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(first, r.err.rfind(c.message)) << "printed more than once: " << r.err;
    EXPECT_EQ(r.err.find("ampc: error: "), r.err.rfind("ampc: error: ")) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("rank 0 of 3"))) << r.err;  // no line about a rank
  }
}

// The model's own batches are not global batches: the error says what --data must hold with
// N ranks and which rows each rank takes.
TEST_F(DataParallelCliTest, DataOfTheModelsBatchesExplainsTheGlobalBatch) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.05");
  CliResult r = train(trained, "--nproc 3 --data " + data("mlp.train.npz") + " --steps 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("must be f32[N,24,64]"));
  EXPECT_THAT(r.err, HasSubstr("with 3 ranks, each batch of --data is a global batch of 3 x the "
                               "model's 8 rows, and rank r takes rows 8r to 8r+7"));
}

// --comm picks the communicator: nccl moves GPU memory, so it needs --device cuda (refused before
// any rank starts), and like the other data-parallel flags it is an error with one rank.
TEST_F(DataParallelCliTest, CommNcclNeedsCudaAndCommNeedsSeveralRanks) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.05");
  CliResult r = train(trained, "--nproc 2 --comm nccl --data " + global_batches(2) + " --steps 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--comm nccl communicates between GPUs: use it with --device cuda"));
  EXPECT_THAT(r.err, Not(HasSubstr("rank 1")));  // refused before the ranks started

  r = train(trained, "--data " + data("mlp.train.npz") + " --steps 1 --comm gloo");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--comm gloo applies to data-parallel training only"));

  r = train(trained, "--data " + data("mlp.train.npz") + " --steps 1 --comm mpi");
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--comm"));

  // gloo, named, on 2 cpu ranks: trains.
  r = train(trained, "--nproc 2 --comm gloo --data " + global_batches(2) + " --steps 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// The example CNN (two BatchNorms) on 2 ranks through the CLI, with the BatchNorm statistics
// of the whole global batch (the default; tests/runtime/data_parallel_test.cc shows it trains as
// one rank with that batch) and with each rank's own (--local-batch-norm): both train, and the
// flag changes the first step's loss.
TEST_F(DataParallelCliTest, TheCnnTrainsOnTwoRanksWithSynchronizedOrLocalBatchNorm) {
  const std::string trained = compile("cnn", "--optimizer sgd --momentum 0.9 --lr 0.05");
  const std::string common =
      "--nproc 2 --data " + regrouped("cnn", 2, 2, "cnn_global.npz") + " --steps 4 --log ";
  CliResult r = train(trained, common + path("sync.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(trained, common + path("local.jsonl") + " --local-batch-norm");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> sync = read_log(path("sync.jsonl"));
  const std::vector<LogLine> local = read_log(path("local.jsonl"));
  ASSERT_EQ(sync.size(), 4u);
  ASSERT_EQ(local.size(), 4u);
  for (const LogLine& line : sync) EXPECT_TRUE(std::isfinite(line.loss));
  EXPECT_NE(sync[0].loss, local[0].loss);
}

// Two ranks: 10 steps in one run, and 4 steps then a resume up to 10, leave byte-identical
// checkpoints and logs (every rank loads rank 0's checkpoint; the data position is the step).
TEST_F(DataParallelCliTest, AResumeWithTheSameRanksIsBitIdentical) {
  const std::string ranks_model = compile("mlp", "--optimizer adamw --lr 0.01");
  const std::string global = global_batches(3);
  const std::string common = "--nproc 2 --data " + global + " --checkpoint ";
  CliResult r = train(ranks_model, common + path("a") + " --steps 10 --log " + path("a.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(ranks_model, common + path("b") + " --steps 4 --log " + path("b.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(ranks_model, common + path("b") + " --steps 10 --resume --log " + path("b.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("after step 4"));
  const std::string a = read_file(path("a/checkpoint.safetensors"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == read_file(path("b/checkpoint.safetensors")));
  EXPECT_EQ(read_log(path("b.jsonl")).size(), 10u);
  EXPECT_EQ(read_file(path("a.jsonl")), read_file(path("b.jsonl")));
}

TEST_F(DataParallelCliTest, RanksStartedWithTorchrunsVariablesMeetThroughRankZerosStore) {
  const std::string ranks_model = compile("mlp", "--optimizer sgd --lr 0.05");
  const std::string global = global_batches(2);
  const int port = testing::free_port();  // rank 0 serves the rendezvous store there
  std::string script;
  for (int rank = 0; rank < 2; ++rank) {
    script += "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
              " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " + AMPC_BINARY +
              " train " + ranks_model + " --progress none --comm-timeout 60 --data " + global +
              " --steps 4 --log " + path("rank" + std::to_string(rank) + ".jsonl") + " & p" +
              std::to_string(rank) + "=$!; ";
  }
  script += "wait $p0; a=$?; wait $p1; b=$?; exit $((a + b))";
  std::string out, err;
  ASSERT_EQ(testing::run_command("bash -c '" + script + "'", &out, &err), 0) << err;
  // Only rank 0 writes the log.
  EXPECT_EQ(read_log(path("rank0.jsonl")).size(), 4u);
  EXPECT_FALSE(fs::exists(path("rank1.jsonl")));
}

// The processes `launcher` started, once there are `count` of them (or what there is after 30 s).
std::vector<pid_t> ranks_of(pid_t launcher, size_t count) {
  std::vector<pid_t> children;
  const auto start = std::chrono::steady_clock::now();
  while (children.size() < count &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    children.clear();
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string pid, comm, state;
      pid_t parent = 0;
      if (stat >> pid >> comm >> state >> parent && parent == launcher) {
        children.push_back(std::stoi(pid));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return children;
}

// `ampc train ARGS...` started in a child process with its stderr in `err_file`.
pid_t start_ampc(const std::string& err_file, std::vector<std::string> args) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen(err_file.c_str(), "w", stderr);
    std::vector<char*> argv{const_cast<char*>(AMPC_BINARY), const_cast<char*>("train")};
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(AMPC_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

// A stop signal sent to the launcher alone (a scheduler's SIGTERM, `kill`, a hang-up) reaches
// every rank: they stop after a step, rank 0 saves the checkpoint and says so, the launcher
// exits 128 + the signal, and no rank is left running. (The ranks do not agree on the step they
// stop after: one that started the next step before the signal reached it fails when the others
// leave, with an error of its own.)
TEST_F(DataParallelCliTest, AStopSignalToTheLauncherStopsEveryRankWithACheckpoint) {
  const std::string ranks_model = compile("mlp", "--optimizer sgd --momentum 0.9 --lr 0.05");
  const std::string err_file = path("err.txt");
  const pid_t launcher = start_ampc(
      err_file, {ranks_model, "--nproc", "2", "--data", global_batches(4), "--steps", "100000000",
                 "--progress", "none", "--comm-timeout", "30", "--checkpoint", path("stopped")});
  ASSERT_GT(launcher, 0);
  const std::vector<pid_t> children = ranks_of(launcher, 2);
  ASSERT_EQ(children.size(), 2u);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // both are training by now
  kill(launcher, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  const bool left = std::any_of(children.begin(), children.end(),
                                [](pid_t child) { return kill(child, 0) == 0; });
  for (pid_t child : children) kill(child, SIGKILL);  // had the launcher left them running
  EXPECT_FALSE(left);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(err_file);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  const std::string err = read_file(err_file);
  EXPECT_THAT(err, HasSubstr("ampc: interrupted by SIGTERM after step")) << err;
  EXPECT_TRUE(runtime::read_safetensors(path("stopped/checkpoint.safetensors")).ok());
}

// Only rank 0, which saves, removes what an interrupted save left: another rank would remove
// the temporary of rank 0's save in progress (a resume at the last step saves at once; its
// ranks raced, and half the runs failed).
TEST_F(DataParallelCliTest, OnlyTheSavingRankRemovesAnInterruptedSavesTemporary) {
  const std::string ranks_model = compile("mlp", "--optimizer sgd --lr 0.05");
  const std::string global = global_batches(2);
  const std::string dir = path("ckpt");
  CliResult r = train(ranks_model, "--nproc 2 --data " + global + " --steps 2 --checkpoint " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(run);
    std::ofstream(dir + "/.checkpoint.safetensors.Ab12Cd") << "half a checkpoint";
    r = train(ranks_model,
              "--nproc 2 --data " + global + " --steps 2 --resume --checkpoint " + dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::regex removed("ampc: removed ");
    EXPECT_EQ(std::distance(std::sregex_iterator(r.err.begin(), r.err.end(), removed),
                            std::sregex_iterator()),
              1)
        << r.err;
  }
}

// A rank killed mid-run (checkpoints every 50 steps): the launcher exits non-zero within the
// timeout naming it, and a resume from the last checkpoint up to K + 6 steps ends with the
// checkpoint, byte for byte, of a run that was never killed.
TEST_F(DataParallelCliTest, AKilledRankMakesTheLauncherFailNamingItAndTheRunResumes) {
  const std::string ranks_model = compile("mlp", "--optimizer sgd --momentum 0.9 --lr 0.05");
  const std::string global = global_batches(4);
  const std::string err_file = path("err.txt");
  const std::string killed_dir = path("killed");
  const pid_t launcher =
      start_ampc(err_file, {ranks_model, "--nproc", "2", "--data", global, "--steps", "100000000",
                            "--progress", "none", "--comm-timeout", "30", "--checkpoint",
                            killed_dir, "--checkpoint-every", "50"});
  ASSERT_GT(launcher, 0);
  // Wait for the two ranks, then kill rank 1's process (the higher pid: started second).
  const std::vector<pid_t> children = ranks_of(launcher, 2);
  ASSERT_EQ(children.size(), 2u);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // both are training by now
  kill(std::max(children[0], children[1]), SIGKILL);
  int status = 0;
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  const std::string err = read_file(err_file);
  EXPECT_THAT(err, HasSubstr("ampc: error: rank 1 of 2 was killed by SIGKILL")) << err;

  const std::string checkpoint = killed_dir + "/checkpoint.safetensors";
  absl::StatusOr<runtime::SafetensorsFile> saved = runtime::read_safetensors(checkpoint);
  ASSERT_TRUE(saved.ok()) << saved.status();
  const int64_t steps = std::stoll(saved->metadata.at("ampc.steps_done")) + 6;
  CliResult r = train(ranks_model, "--nproc 2 --data " + global + " --resume --checkpoint " +
                                       killed_dir + " --steps " + std::to_string(steps));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(ranks_model, "--nproc 2 --data " + global + " --checkpoint " + path("whole") +
                             " --steps " + std::to_string(steps));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string resumed = read_file(checkpoint);
  ASSERT_FALSE(resumed.empty());
  EXPECT_TRUE(resumed == read_file(path("whole/checkpoint.safetensors")));
}

}  // namespace
}  // namespace ampc::train_cli
