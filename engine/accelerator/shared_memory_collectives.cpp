#include "engine/accelerator/shared_memory_collectives.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/accelerator/collective_plan.h"
#include "engine/core/env.h"
#include "engine/core/errors.h"

namespace engine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxRanks = 256;
constexpr int64_t kNotEligible = INT64_MIN;  // a fingerprint no list of tensors has

// What each rank posts for the others: who it is, what it is about to reduce, setup results.
struct alignas(64) RankEntry {
  int64_t pid;
  int64_t fingerprint;  // shapes_fingerprint of this call's tensors, or kNotEligible
  int64_t bytes;        // their total size
  int64_t ok;           // 1 when this rank's last setup step succeeded
  int64_t arena;        // this call's buffer: kNoArena, kArenaCandidate or kArenaAdopted
};
// A call's lone buffer, as one rank sees it: nothing special; the same whole storage of >= 1 MiB
// as the last large call (the gradient buffer, every step), which may move into shared memory; or
// a storage that already lives in this rank's shared arena, reduced in place with one pass.
constexpr int64_t kNoArena = 0, kArenaCandidate = 1, kArenaAdopted = 2;
constexpr int64_t kArenaMinBytes = 1 << 20;

// The job's control block, in its own shared-memory object. Zero-filled at creation.
struct Control {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;  // bumped by the last rank into a barrier; ranks wait on it
  RankEntry rank[kMaxRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "a futex needs a plain 32-bit word");

// A shared-memory mapping, unmapped when it goes.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  Mapping(Mapping&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), size_(o.size_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    std::swap(addr_, o.addr_);
    std::swap(size_, o.size_);
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr_) munmap(addr_, size_);
  }
  void* get() const { return addr_; }
  explicit operator bool() const { return addr_ != nullptr; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// Creates (and reserves: a full /dev/shm fails here, not with SIGBUS on first write) or opens a
// shared-memory object of `size` bytes and maps it. Empty mapping + `why` on failure.
Mapping map_object(const std::string& name, size_t size, bool create, std::string& why) {
  const int fd = shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0) {
    why = fmt::format("shm_open({}): {}", name, std::strerror(errno));
    return {};
  }
  if (create) {
    if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0) {
      why = fmt::format("reserving {} bytes of /dev/shm for {}: {}", size, name, std::strerror(rc));
      close(fd);
      shm_unlink(name.c_str());
      return {};
    }
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    why = fmt::format("mmap({}): {}", name, std::strerror(err));
    if (create) shm_unlink(name.c_str());
    return {};
  }
  return Mapping(p, size);
}

// The memory of an adopted storage: its DataPtr's context, freed (unmapped) with the storage.
// `alive` tells the collectives, which keep only a pointer, that the storage still exists.
struct ArenaContext {
  Mapping map;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  static void free(void* ctx) {
    auto* c = static_cast<ArenaContext*>(ctx);
    *c->alive = false;
    delete c;
  }
};

// out[q][i] = (sum over q of in[q][i], in rank order) * scale for i in [b, e), on every rank's
// buffer q at once. Two ranks, the common case, get restrict pointers so that the loop vectorises.
template <class T>
void sum_into_all(const std::vector<T*>& p, int64_t b, int64_t e, T scale, bool scaled) {
  if (p.size() == 2) {
    T* __restrict x = p[0];
    T* __restrict y = p[1];
    if (scaled)
      for (int64_t i = b; i < e; ++i) x[i] = y[i] = (x[i] + y[i]) * scale;
    else
      for (int64_t i = b; i < e; ++i) x[i] = y[i] = x[i] + y[i];
    return;
  }
  for (int64_t i = b; i < e; ++i) {
    T sum = p[0][i] + p[1][i];
    for (size_t q = 2; q < p.size(); ++q) sum += p[q][i];
    if (scaled) sum *= scale;
    for (T* q : p) q[i] = sum;
  }
}

// A storage moved into shared memory: its DataPtr's context (compared, never dereferenced once
// `alive` is false), and every rank's mapping of it (this rank's own lives in the context).
struct Adopted {
  void* context;
  std::shared_ptr<bool> alive;
  std::vector<Mapping> peers;
};
// Buffers one update_shared call can share (their adoption states travel as a bit mask).
constexpr size_t kMaxShared = 16;

class SharedMemoryAllReduce final : public Collectives {
 public:
  SharedMemoryAllReduce(std::unique_ptr<Collectives> inner, std::chrono::milliseconds timeout, std::string base,
                        Mapping control)
      : inner_(std::move(inner)),
        rank_(inner_->rank()),
        size_(inner_->size()),
        timeout_(timeout),
        base_(std::move(base)),
        control_(std::move(control)),
        ctl_(static_cast<Control*>(control_.get())),
        arena_off_(switched_off("ENGINE_SHM_ARENA")) {}  // never move buffers (to measure the copying path)

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<torch::Tensor> all_gather(const torch::Tensor& t) override { return inner_->all_gather(t); }
  void broadcast(std::vector<torch::Tensor>& tensors, int root) override { inner_->broadcast(tensors, root); }
  void barrier() override { inner_->barrier(); }

  void all_reduce_sum(std::vector<torch::Tensor>& tensors) override { reduce(tensors, false); }
  void all_reduce_mean(std::vector<torch::Tensor>& tensors) override { reduce(tensors, true); }

 private:
  // SUM (mean: times 1/size, fused where the arena path runs).
  void reduce(std::vector<torch::Tensor>& tensors, bool mean) {
    // Every rank posts what it holds, then all take the same decision from the same posts.
    int64_t bytes = 0;
    bool eligible = !tensors.empty();
    for (const auto& t : tensors) {
      eligible = eligible && t.defined() && t.layout() == torch::kStrided && t.device().is_cpu() &&
                 t.scalar_type() == tensors.front().scalar_type() &&
                 (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
      if (eligible) bytes += t.numel() * t.element_size();
    }
    RankEntry& mine = ctl_->rank[rank_];
    mine.fingerprint = eligible && bytes > 0 ? shapes_fingerprint(tensors) : kNotEligible;
    mine.bytes = bytes;
    mine.arena = mine.fingerprint == kNotEligible ? kNoArena : arena_state(tensors);
    wait_for_all();
    bool same = !disabled_;
    int64_t arena = kArenaAdopted;  // the least any rank posted
    for (int q = 0; q < size_ && same; ++q) {
      same = ctl_->rank[q].fingerprint == ctl_->rank[0].fingerprint && ctl_->rank[q].bytes == ctl_->rank[0].bytes;
      arena = std::min(arena, ctl_->rank[q].arena);
    }
    auto through_inner = [&] { mean ? inner_->all_reduce_mean(tensors) : inner_->all_reduce_sum(tensors); };
    // Different lists on different ranks: Gloo's checks name each rank's shapes and throw.
    if (!same || ctl_->rank[0].fingerprint == kNotEligible) return through_inner();
    // The gradient buffer of every step: in shared memory (moved there on its second call), each
    // rank sums its chunk of every rank's buffer and writes the result into all of them.
    if (arena == kArenaAdopted || (arena == kArenaCandidate && adopt(tensors.front()))) {
      reduce_in_arenas(tensors.front(), mean);
      return;
    }
    if (!ensure_capacity(2 * std::min(bytes, segment_elements(tensors.front().element_size()) * tensors.front().element_size())))
      return through_inner();
    const auto dtype = tensors.front().scalar_type();
    const int64_t n = bytes / tensors.front().element_size();
    const int64_t segment = segment_elements(tensors.front().element_size());
    torch::NoGradGuard no_grad;
    // The tensors as one virtual 1-d array: flat views (copies for non-contiguous ones).
    std::vector<torch::Tensor> flats;
    for (const auto& t : tensors) flats.push_back(t.is_contiguous() ? t.view({-1}) : t.reshape({-1}).clone());
    // Moves elements [b, e) of the virtual array to or from `buf` (buf[0] = element b).
    auto transfer = [&](int64_t b, int64_t e, const torch::Tensor& buf, bool into_buf) {
      int64_t at = 0;
      for (auto& f : flats) {
        const int64_t lo = std::max(b, at), hi = std::min(e, at + f.numel());
        if (lo < hi) {
          torch::Tensor part = f.narrow(0, lo - at, hi - lo), shm = buf.narrow(0, lo - b, hi - lo);
          if (into_buf) shm.copy_(part);
          else part.copy_(shm);
        }
        at += f.numel();
      }
    };
    // Segment by segment, so that a segment's bytes stay in cache from copy-in to copy-out, in two
    // alternating halves of each slot: segment k+1 is written while peers may still read segment k.
    // Per segment: each rank copies its values in; barrier; rank r sums sub-chunk r over every
    // slot, in rank order, into its own slot; barrier; each rank reads sub-chunk c from slot c.
    for (int64_t s0 = 0, k = 0; s0 < n; s0 += segment, ++k) {
      const int64_t len = std::min(segment, n - s0), half = (k % 2) * segment;
      auto buf = [&](int q) {
        return torch::from_blob(static_cast<char*>(slots_[q].get()) + half * tensors.front().element_size(), {len},
                                torch::TensorOptions().dtype(dtype));
      };
      auto chunk = [&](int c) { return std::make_pair(c * len / size_, (c + 1) * len / size_); };
      transfer(s0, s0 + len, buf(rank_), true);
      wait_for_all();
      {
        const auto [b, e] = chunk(rank_);
        std::vector<torch::Tensor> parts;
        for (int q = 0; q < size_; ++q) parts.push_back(buf(q).narrow(0, b, e - b));
        if (size_ == 2) {
          torch::add_out(parts[rank_], parts[0], parts[1]);  // element-wise: in place is safe
        } else {
          torch::Tensor sum = parts[0] + parts[1];
          for (int q = 2; q < size_; ++q) sum.add_(parts[q]);
          parts[rank_].copy_(sum);
        }
      }
      wait_for_all();
      for (int c = 0; c < size_; ++c) {
        const auto [b, e] = chunk(c);
        if (b < e) transfer(s0 + b, s0 + e, buf(c).narrow(0, b, e - b), false);
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].is_contiguous()) tensors[i].copy_(flats[i].view(tensors[i].sizes()));
      if (mean) tensors[i].mul_(1.0 / size_);  // as Collectives::all_reduce_mean
    }
  }

  // True when `t` is a whole contiguous storage (no other memory shares it), which adopt() can move.
  static bool whole_storage(const torch::Tensor& t) {
    return t.is_contiguous() && t.has_storage() && t.storage_offset() == 0 &&
           static_cast<size_t>(t.numel() * t.element_size()) == t.storage().nbytes();
  }

  // The adopted storage `t` lives in, or nullptr.
  const Adopted* adopted(const torch::Tensor& t) const {
    if (!t.has_storage()) return nullptr;
    for (const auto& a : adopted_)
      if (*a.alive && t.storage().data_ptr().get_context() == a.context) return &a;
    return nullptr;
  }

  // Forgets adopted storages that were freed (an optimizer rebuilt its buffers).
  void forget_freed() {
    adopted_.erase(std::remove_if(adopted_.begin(), adopted_.end(), [](const Adopted& a) { return !*a.alive; }),
                   adopted_.end());
  }

  // kArenaAdopted when `tensors` is one buffer whose storage lives in this rank's arena;
  // kArenaCandidate when it is a whole contiguous storage of >= 1 MiB that the last large call
  // passed too; else kNoArena. Remembers large buffers for the next call's comparison.
  int64_t arena_state(const std::vector<torch::Tensor>& tensors) {
    if (tensors.size() != 1 || arena_off_) return kNoArena;
    const torch::Tensor& t = tensors.front();
    if (!whole_storage(t) || t.numel() * t.element_size() < kArenaMinBytes) return kNoArena;
    if (adopted(t)) return kArenaAdopted;
    const std::pair<const void*, const void*> id{t.storage().unsafeGetStorageImpl(), t.storage().data()};
    return std::exchange(last_large_, id) == id ? kArenaCandidate : kNoArena;
  }

  // Collective: every rank moves its buffer's storage into a new shared-memory object that every
  // rank maps (the storage's views, e.g. each parameter's .grad, follow: they read the storage's
  // pointer). False on every rank, and for good, when any rank could not.
  bool adopt(const torch::Tensor& t) {
    const size_t bytes = t.storage().nbytes();
    const size_t capacity = (bytes + 4095) / 4096 * 4096;
    std::vector<Mapping> maps =
        map_every_rank("a", capacity, "buffers in shared memory off",
                       "the all-reduce copies gradients through its slots, every rank steps every parameter",
                       [&](void* own) { std::memcpy(own, t.storage().data(), bytes); });
    if (maps.empty()) {
      arena_off_ = true;
      return false;
    }
    auto* ctx = new ArenaContext{std::move(maps[rank_])};
    adopted_.push_back(Adopted{ctx, ctx->alive, std::move(maps)});
    // The old memory goes with the returned DataPtr; the storage keeps its size and allocator.
    t.storage().set_data_ptr(c10::DataPtr(ctx->map.get(), ctx, &ArenaContext::free, t.device()));
    return true;
  }

  // Rank q's copy of the adopted storage `a`, as T*.
  template <class T>
  T* peer(const Adopted& a, int q) const {
    return static_cast<T*>(q == rank_ ? static_cast<ArenaContext*>(a.context)->map.get() : a.peers[q].get());
  }

  // The in-place all-reduce of buffers that live in every rank's arena: every rank has arrived
  // (its gradients are final), so rank r sums chunk r of all of them and writes it to all; one
  // barrier then says every chunk is everywhere. One pass over memory instead of a copy in, a
  // sum and a copy out; the sum of element i is taken by one rank in rank order, as below.
  void reduce_in_arenas(const torch::Tensor& t, bool mean) {
    const Adopted& a = *adopted(t);
    const int64_t n = t.numel(), b = rank_ * n / size_, e = (rank_ + 1) * n / size_;
    auto run = [&](auto zero) {
      using T = decltype(zero);
      std::vector<T*> p(size_);
      for (int q = 0; q < size_; ++q) p[q] = peer<T>(a, q);
      sum_into_all<T>(p, b, e, static_cast<T>(1.0 / size_), mean);
    };
    if (t.scalar_type() == torch::kFloat)
      run(0.0f);
    else
      run(0.0);
    wait_for_all();
  }

  bool update_shared(const std::vector<torch::Tensor>& buffers, const SharedUpdate& update) override {
    forget_freed();
    // Every rank posts what it holds (sizes; which buffers already live in shared memory), then
    // all take the same decision from the same posts.
    bool eligible = !buffers.empty() && buffers.size() <= kMaxShared && !arena_off_;
    int64_t bytes = 0, in_shm = 0;
    for (size_t i = 0; i < buffers.size() && eligible; ++i) {
      const auto& t = buffers[i];
      eligible = t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.numel() > 0 &&
                 t.numel() == buffers.front().numel() && whole_storage(t);
      if (!eligible) break;
      bytes += t.numel() * t.element_size();
      if (adopted(t)) in_shm |= int64_t{1} << i;
    }
    RankEntry& mine = ctl_->rank[rank_];
    mine.fingerprint = eligible ? shapes_fingerprint(buffers) : kNotEligible;
    mine.bytes = bytes;
    mine.arena = in_shm;
    wait_for_all();  // also: every rank's writes to its buffers (its gradients) are done
    bool same = ctl_->rank[0].fingerprint != kNotEligible;
    for (int q = 0; q < size_ && same; ++q)
      same = ctl_->rank[q].fingerprint == ctl_->rank[0].fingerprint && ctl_->rank[q].bytes == ctl_->rank[0].bytes &&
             ctl_->rank[q].arena == ctl_->rank[0].arena;
    if (!same) {
      wait_for_all();  // every rank has read the posts before the next call overwrites them
      return false;
    }
    for (size_t i = 0; i < buffers.size(); ++i)
      if (!(in_shm >> i & 1) && !adopt(buffers[i])) return false;  // adopt() is collective: false on every rank
    PeerBuffers peers(buffers.size(), std::vector<float*>(size_));
    for (size_t i = 0; i < buffers.size(); ++i)
      for (int q = 0; q < size_; ++q) peers[i][q] = peer<float>(*adopted(buffers[i]), q);
    // Shares on 16-element (64-byte) boundaries: no cache line is written by two ranks.
    const int64_t n = buffers.front().numel();
    std::vector<int64_t> edges(size_ + 1);
    for (int q = 0; q <= size_; ++q) edges[q] = q == size_ ? n : std::min(n, (q * n / size_) / 16 * 16);
    update(edges, peers);
    wait_for_all();
    return true;
  }

  // Elements per segment: 1 MiB by default (ENGINE_SHM_SEGMENT_KB to measure others).
  static int64_t segment_elements(int64_t element_size) {
    static const int64_t kb = [] {
      const char* e = std::getenv("ENGINE_SHM_SEGMENT_KB");
      return e && std::atoll(e) > 0 ? std::atoll(e) : 1024;
    }();
    return std::max<int64_t>(1, kb * 1024 / element_size);
  }

  // A barrier over the ranks' shared control block: spin briefly, then sleep on a futex in 20 ms
  // slices, checking that every peer process still exists and the timeout has not passed.
  void wait_for_all() {
    auto* word = reinterpret_cast<uint32_t*>(&ctl_->generation);
    const uint32_t gen = ctl_->generation.load(std::memory_order_acquire);
    if (ctl_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
      ctl_->arrived.store(0, std::memory_order_relaxed);
      ctl_->generation.fetch_add(1, std::memory_order_release);
      syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
      return;
    }
    const auto start = Clock::now();
    for (int spin = 0;; ++spin) {
      if (ctl_->generation.load(std::memory_order_acquire) != gen) return;
      if (spin < 200) continue;
      timespec slice{0, 20'000'000};
      syscall(SYS_futex, word, FUTEX_WAIT, gen, &slice, nullptr, 0);
      if (ctl_->generation.load(std::memory_order_acquire) != gen) return;
      for (int q = 0; q < size_; ++q) {
        const auto pid = static_cast<pid_t>(ctl_->rank[q].pid);
        if (q != rank_ && kill(pid, 0) != 0 && errno == ESRCH)
          throw RunError(fmt::format("shared-memory all-reduce on rank {} of {}: rank {} (pid {}) is gone; stopping",
                                     rank_, size_, q, pid));
      }
      if (Clock::now() - start > timeout_)
        throw RunError(fmt::format("shared-memory all-reduce on rank {} of {}: the other ranks did not arrive within {} s "
                                   "(accelerator.timeout_s); a rank is stuck or died",
                                   rank_, size_, timeout_.count() / 1000.0));
    }
  }

  // Every rank maps every rank's data slot of at least `bytes`. Collective; false (on every rank,
  // and for good) when any rank could not, e.g. /dev/shm too small: Gloo then does the work.
  bool ensure_capacity(int64_t bytes) {
    if (bytes <= capacity_) return true;
    const int64_t capacity = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    std::vector<Mapping> maps = map_every_rank("r", static_cast<size_t>(capacity), "shared-memory all-reduce off",
                                               "gradients go through Gloo", nullptr);
    if (maps.empty()) {
      disabled_ = true;
      return false;
    }
    slots_ = std::move(maps);
    capacity_ = capacity;
    return true;
  }

  // Collective: each rank creates a shared-memory object of `capacity` bytes (`fill` writes its
  // first contents before any peer can look), then maps every other rank's. Returns the mappings in
  // rank order, or none on every rank when any rank failed (the main process says why, once).
  std::vector<Mapping> map_every_rank(const char* tag, size_t capacity, const char* off, const char* instead,
                                      const std::function<void(void*)>& fill) {
    ++generation_;
    auto name = [&](int q) { return fmt::format("{}-{}{}-g{}", base_, tag, q, generation_); };
    std::string why;
    std::vector<Mapping> maps(size_);
    maps[rank_] = map_object(name(rank_), capacity, true, why);
    if (maps[rank_] && fill) fill(maps[rank_].get());
    ctl_->rank[rank_].ok = maps[rank_] ? 1 : 0;
    wait_for_all();
    bool ok = true;
    for (int q = 0; q < size_; ++q) ok = ok && ctl_->rank[q].ok == 1;
    if (ok)
      for (int q = 0; q < size_ && ok; ++q)
        if (q != rank_) ok = static_cast<bool>(maps[q] = map_object(name(q), capacity, false, why));
    wait_for_all();  // everyone has read the first round of `ok` before it is overwritten
    ctl_->rank[rank_].ok = ok ? 1 : 0;
    wait_for_all();
    if (maps[rank_]) shm_unlink(name(rank_).c_str());  // mapped by all who could: the name can go
    for (int q = 0; q < size_; ++q) ok = ok && ctl_->rank[q].ok == 1;
    if (ok) return maps;
    // Only the main process prints; the reason is its own if it failed, else another rank's.
    if (rank_ == 0)
      std::cerr << "engine: " << off << " (" << (why.empty() ? "another rank could not map /dev/shm" : why) << "); "
                << instead << "\n";
    return {};
  }

  std::unique_ptr<Collectives> inner_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::string base_;
  Mapping control_;
  Control* ctl_;
  std::vector<Mapping> slots_;
  int64_t capacity_ = 0;
  int64_t generation_ = 0;
  bool disabled_ = false;
  // The storages moved into shared memory (the gradient buffer; an optimizer's buffers), the last
  // large buffer seen.
  std::vector<Adopted> adopted_;
  std::pair<const void*, const void*> last_large_{nullptr, nullptr};
  bool arena_off_ = false;
};

// Sum over ranks of one number, through `inner`.
double sum_over_ranks(Collectives& inner, double v) {
  std::vector<torch::Tensor> t{torch::full({1}, v, torch::kDouble)};
  inner.all_reduce_sum(t);
  return t[0].item<double>();
}

}  // namespace

std::unique_ptr<Collectives> with_shared_memory_all_reduce(std::unique_ptr<Collectives> inner, const WorldInfo& world,
                                                           std::chrono::milliseconds timeout) {
  if (world.world_size < 2 || world.world_size > kMaxRanks || world.local_world_size != world.world_size ||
      world.rendezvous_file.empty() || switched_off("ENGINE_SHM_ALLREDUCE"))
    return inner;
  // The private rendezvous path is unique to this job: so is the name derived from it.
  const std::string base = fmt::format("/engine-{}-{:016x}", getuid(), std::hash<std::string>{}(world.rendezvous_file));
  const std::string control_name = base + "-ctl";
  std::string why;
  Mapping control;
  if (world.rank == 0) {
    shm_unlink(control_name.c_str());  // a leftover of a crashed job with the same name: never ours
    control = map_object(control_name, sizeof(Control), true, why);
  }
  if (sum_over_ranks(*inner, control ? 1 : 0) < 1) return inner;  // rank 0 could not create it
  if (world.rank != 0) control = map_object(control_name, sizeof(Control), false, why);
  if (control) static_cast<Control*>(control.get())->rank[world.rank].pid = getpid();
  const bool all = sum_over_ranks(*inner, control ? 1 : 0) == world.world_size;
  if (world.rank == 0) shm_unlink(control_name.c_str());  // everyone who could has it mapped
  if (!all) return inner;
  return std::make_unique<SharedMemoryAllReduce>(std::move(inner), timeout, base, std::move(control));
}

}  // namespace engine
