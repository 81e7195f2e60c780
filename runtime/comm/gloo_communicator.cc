// The Gloo communicator; runtime/comm/gloo_communicator.h says what it does.
//
// Every collective is a task on one worker thread, so they run in the order queued, each with
// the next tag (the same on every rank, since every rank queues the same sequence). All-reduce,
// broadcast and all-gather are Gloo's (ring all-reduce: every rank ends with the same bits);
// reduce-scatter all-reduces a copy of `send` and keeps this rank's block. The first failure
// breaks the communicator: that task's Status is every later task's.
#include "runtime/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compiler/strings.h"
#include "runtime/comm/tcp_store.h"

namespace ampc::runtime::comm {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Calls fn(T{}) with Gloo's element type for `dtype` (gloo::float16 has f16's bits), or does
// nothing for a type Gloo does not reduce.
template <typename Fn>
void visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(float{});
    case DType::kF64:
      return fn(double{});
    case DType::kF16:
      return fn(gloo::float16{});
    case DType::kI32:
      return fn(int32_t{});
    case DType::kI64:
      return fn(int64_t{});
    case DType::kU8:
      return fn(uint8_t{});
    default:  // not a type Gloo reduces: fn is not called
      return;
  }
}

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  return op == ReduceOp::kSum ? static_cast<ReduceFn>(&gloo::sum<T>)
                              : static_cast<ReduceFn>(&gloo::max<T>);
}

class GlooWork final : public Work {
 public:
  explicit GlooWork(std::shared_future<absl::Status> done) : done_(std::move(done)) {}
  absl::Status wait() override { return done_.get(); }

 private:
  std::shared_future<absl::Status> done_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(int rank, int size, std::shared_ptr<gloo::Context> context,
                   std::chrono::milliseconds timeout, std::unique_ptr<TcpStoreServer> server)
      : Communicator(rank, size),
        context_(std::move(context)),
        timeout_(timeout),
        server_(std::move(server)) {
    worker_ = std::thread([this] { work(); });
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_one();
    worker_.join();
  }

  std::string_view engine() const override { return "gloo"; }

  bool supports(DType dtype) const override {
    bool known = false;
    visit_dtype(dtype, [&](auto) { known = true; });
    return known;
  }

  std::unique_ptr<Work> all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    return queue(
        str_cat("all-reduce (", reduce_op_name(op), ") of ", count, " ", dtype_name(dtype)), dtype,
        [=, this](uint32_t tag) {
          if (count == 0 || size() == 1) return;
          visit_dtype(dtype, [&]<typename T>(T) {
            gloo::AllreduceOptions opts(context_);
            opts.setOutput(static_cast<T*>(data), static_cast<size_t>(count));
            opts.setReduceFunction(reduce_fn<T>(op));
            opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::allreduce(opts);
          });
        });
  }

  std::unique_ptr<Work> broadcast(void* data, int64_t count, DType dtype, int root) override {
    return queue(
        str_cat("broadcast from rank ", root, " of ", count, " ", dtype_name(dtype)), dtype,
        [=, this](uint32_t tag) {
          if (root < 0 || root >= size()) {
            throw std::invalid_argument(str_cat("no rank ", root, " in a group of ", size()));
          }
          if (count == 0 || size() == 1) return;
          visit_dtype(dtype, [&]<typename T>(T) {
            gloo::BroadcastOptions opts(context_);
            opts.setOutput(static_cast<T*>(data), static_cast<size_t>(count));
            opts.setRoot(root);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::broadcast(opts);
          });
        });
  }

  std::unique_ptr<Work> all_gather(const void* send, void* gathered, int64_t count,
                                   DType dtype) override {
    return queue(
        str_cat("all-gather of ", count, " ", dtype_name(dtype)), dtype, [=, this](uint32_t tag) {
          const size_t bytes = static_cast<size_t>(count * dtype_size(dtype));
          if (size() == 1 || count == 0) {
            if (bytes > 0) std::memmove(gathered, send, bytes);
            return;
          }
          visit_dtype(dtype, [&]<typename T>(T) {
            gloo::AllgatherOptions opts(context_);
            opts.setInput(const_cast<T*>(static_cast<const T*>(send)), static_cast<size_t>(count));
            opts.setOutput(static_cast<T*>(gathered),
                           static_cast<size_t>(count) * static_cast<size_t>(size()));
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::allgather(opts);
          });
        });
  }

  std::unique_ptr<Work> reduce_scatter(const void* send, void* received, int64_t count, DType dtype,
                                       ReduceOp op) override {
    return queue(
        str_cat("reduce-scatter (", reduce_op_name(op), ") of ", count, " ", dtype_name(dtype)),
        dtype, [=, this](uint32_t tag) {
          const size_t block = static_cast<size_t>(count * dtype_size(dtype));
          if (block == 0) return;
          std::vector<std::byte> all(block * static_cast<size_t>(size()));
          std::memcpy(all.data(), send, all.size());
          if (size() > 1) {
            visit_dtype(dtype, [&]<typename T>(T) {
              gloo::AllreduceOptions opts(context_);
              opts.setOutput(reinterpret_cast<T*>(all.data()),
                             static_cast<size_t>(count) * static_cast<size_t>(size()));
              opts.setReduceFunction(reduce_fn<T>(op));
              opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
              opts.setTag(tag);
              opts.setTimeout(timeout_);
              gloo::allreduce(opts);
            });
          }
          std::memcpy(received, all.data() + block * static_cast<size_t>(rank()), block);
        });
  }

 private:
  struct Task {
    std::string what;
    std::function<void(uint32_t tag)> run;
    std::promise<absl::Status> done;
  };

  std::unique_ptr<Work> queue(std::string what, DType dtype, std::function<void(uint32_t)> run) {
    Task task{std::move(what), std::move(run), {}};
    std::shared_future<absl::Status> done = task.done.get_future().share();
    if (!supports(dtype)) {
      task.done.set_value(absl::InvalidArgumentError(
          str_cat("rank ", rank(), ": ", task.what, ": Gloo does not reduce ", dtype_name(dtype))));
      return std::make_unique<GlooWork>(std::move(done));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
    return std::make_unique<GlooWork>(std::move(done));
  }

  void work() {
    uint32_t tag = 0;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and nothing left to run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      if (!broken_.ok()) {
        task.done.set_value(broken_);
        continue;
      }
      try {
        task.run(tag++);
        task.done.set_value(absl::OkStatus());
      } catch (const std::invalid_argument& e) {
        task.done.set_value(
            absl::InvalidArgumentError(str_cat("rank ", rank(), ": ", task.what, ": ", e.what())));
      } catch (const std::exception& e) {
        broken_ = absl::UnavailableError(
            str_cat("rank ", rank(), " of ", size(), ": ", task.what, " failed: ", e.what()));
        task.done.set_value(broken_);
      }
    }
  }

  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  // Rank 0's rendezvous store, served while any rank may still read it.
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  absl::Status broken_;  // read and written by the worker only
  std::thread worker_;   // last: starts once everything it reads exists
};

}  // namespace

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// The address this rank's Gloo connections use.
std::string local_hostname(const GlooOptions& options) {
  if (!options.hostname.empty()) return options.hostname;
  if (options.store_directory.empty() && !is_loopback(options.master_addr)) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  }
  return "127.0.0.1";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> connect_gloo(const GlooOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        str_cat("rank ", options.rank, " is not in a group of ", options.size));
  }
  const bool tcp = options.store_directory.empty();
  if (tcp && (options.master_addr.empty() || options.master_port <= 0)) {
    return absl::InvalidArgumentError(
        "Gloo needs a rendezvous directory every rank can reach, or the address and port of "
        "rank 0's store");
  }
  const std::string where =
      tcp ? str_cat(options.master_addr, ":", options.master_port) : options.store_directory;
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<gloo::rendezvous::Store> store;
  if (tcp) {
    if (options.rank == 0) {
      absl::StatusOr<std::unique_ptr<TcpStoreServer>> started =
          TcpStoreServer::start(options.master_port);
      if (!started.ok()) {
        return absl::UnavailableError(
            str_cat("rank 0 of ", options.size, ": ", started.status().message()));
      }
      server = *std::move(started);
    }
    absl::StatusOr<std::unique_ptr<TcpStore>> client =
        TcpStore::connect(options.master_addr, options.master_port, options.timeout);
    if (!client.ok()) {
      return absl::UnavailableError(
          str_cat("rank ", options.rank, " of ", options.size, ": ", client.status().message()));
    }
    store = *std::move(client);
  }
  try {
    gloo::transport::tcp::attr attr;
    if (options.interface.empty()) {
      attr.hostname = local_hostname(options);
    } else {
      attr.iface = options.interface;
    }
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    if (!tcp) store = std::make_unique<gloo::rendezvous::FileStore>(options.store_directory);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(*store, device);
    return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(
        options.rank, options.size, std::move(context), options.timeout, std::move(server)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(str_cat("rank ", options.rank, " of ", options.size,
                                          " could not join the group through ", where, ": ",
                                          e.what()));
  }
}

}  // namespace ampc::runtime::comm
