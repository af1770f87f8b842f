// The device runtime: device allocator over host memory, pinned host allocator, device guard, hooks and
// generator — the parts PyTorch asks a PrivateUse1 backend for (the shape of OpenReg's csrc/runtime and of
// TorchNeuron's NeuronCachingAllocator / NeuronGuardImpl / NeuronHooksInterface).
#include "Neuron.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/AutogradState.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace neuron {

// -- device ordinals --------------------------------------------------------------------------------------
namespace {
std::atomic<int> g_device_count{1};
thread_local c10::DeviceIndex tl_device = 0;
}  // namespace

int device_count() { return g_device_count.load(std::memory_order_relaxed); }
void set_device_count(int count) {
  TORCH_CHECK(count >= 1 && count <= 64, "neuron: device count must be in 1..64, got ", count);
  g_device_count = count;
}
c10::DeviceIndex current_device() { return tl_device; }
void set_current_device(c10::DeviceIndex index) { tl_device = check_index(index); }

// Autograd runs a non-CPU device's backward on a device thread of its own (`pt_autograd_0`), as it does on
// TorchNeuron. Here the device's ops are CPU kernels, and their OpenMP parallel regions would then run from a
// second thread with a thread pool of its own; libgomp, counting more pool threads than CPUs, stops spin-waiting
// between parallel regions, and every CPU op in the process (neuron's and the user's CPU code alike) pays a thread
// wake-up per region: a CPU MLP backward measured 9-73% slower on 2 CPUs once a second pool merely existed
// (BENCHMARKS.md, "Emulated device overhead"). So each thread that runs neuron ops runs its backward itself, as CPU's
// runs: the thread-local switch behind `torch.autograd.set_multithreading_enabled`, set once per thread. A
// program that sets it itself afterwards is obeyed. On TorchNeuron the backward's kernels run on the NeuronCores
// and the device thread only launches them.
void backward_on_calling_thread() {
  thread_local bool set = false;
  if (set) return;
  set = true;
  c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}

c10::DeviceIndex check_index(int64_t index) {
  if (index < 0) return tl_device;
  int n = device_count();
  TORCH_CHECK(index < n, "neuron: invalid device ordinal ", index, ": this (emulated) chip has ", n,
              " logical NeuronCores (valid: neuron:0 .. neuron:", n - 1, "); see neuron_studio.device.info()");
  return static_cast<c10::DeviceIndex>(index);
}

// -- device memory ----------------------------------------------------------------------------------------
namespace {
constexpr int kMaxDevices = 64;
std::mutex g_mem;
MemoryStats g_stats[kMaxDevices];
std::atomic<int64_t> g_next_block{0};
std::unordered_map<int64_t, HostBlock*> g_live;  // blocks holding bytes
struct OpenLog {
  int64_t id;
  size_t first_record, first_renewal;
  std::vector<std::tuple<int64_t, c10::DeviceIndex, int64_t>> baseline;
};
std::vector<OpenLog> g_logs;
std::vector<MemoryRecord> g_records;
std::vector<std::pair<int64_t, int64_t>> g_renewals;
int64_t g_next_log = 0;
int64_t g_total_memory = 0;

struct Description {
  bool valid = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> shape;
};
thread_local Description tl_description;

void delete_block(void* ctx);

void log_record(int8_t kind, const HostBlock* b, const Description* d) {  // g_mem held
  if (g_logs.empty()) return;
  MemoryRecord r;
  r.kind = kind;
  r.id = b->id;
  r.nbytes = b->nbytes;
  r.time_ns = now_ns();
  r.after_seq = last_seq();
  r.device = b->device;
  r.thread = thread_ident();
  r.dtype = (d != nullptr && d->valid) ? static_cast<int8_t>(d->dtype) : -1;
  if (d != nullptr && d->valid) {
    r.shape = d->shape;
    r.has_shape = true;
  }
  g_records.push_back(std::move(r));
}

HostBlock* new_block(c10::intrusive_ptr<c10::StorageImpl> host, c10::DeviceIndex device, int64_t root,
                     const Description* d) {
  auto* b = new HostBlock();
  b->host = std::move(host);
  b->id = ++g_next_block;
  b->root = root > 0 ? root : b->id;
  b->nbytes = static_cast<int64_t>(b->host->nbytes());
  b->device = device;
  if (b->nbytes > 0) {
    std::lock_guard<std::mutex> g(g_mem);
    auto& s = g_stats[device];
    s.allocated += b->nbytes;
    s.num_allocs += 1;
    if (s.allocated > s.peak) s.peak = s.allocated;
    g_live.emplace(b->id, b);
    log_record(1, b, d);
    if (root > 0 && !g_logs.empty()) g_renewals.emplace_back(b->id, b->root);
  }
  return b;
}

void delete_block(void* ctx) {
  auto* b = static_cast<HostBlock*>(ctx);
  if (b->nbytes > 0) {
    std::lock_guard<std::mutex> g(g_mem);
    auto& s = g_stats[b->device];
    s.allocated -= b->nbytes;
    s.num_frees += 1;
    g_live.erase(b->id);
    log_record(-1, b, nullptr);
  }
  delete b;
}

c10::DataPtr data_ptr_of(HostBlock* b) {
  return c10::DataPtr(b->host->mutable_data(), b, &delete_block, c10::Device(kNeuron, b->device));
}

c10::intrusive_ptr<c10::StorageImpl> new_host_storage(size_t nbytes) {
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                               c10::GetCPUAllocator(), /*resizable=*/true);
}

Description take_description() {
  Description d = std::move(tl_description);
  tl_description.valid = false;
  return d;
}

struct NeuronAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    Description d = take_description();
    return data_ptr_of(new_block(new_host_storage(nbytes), current_device(), 0, &d));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached: freed bytes return at once
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // execution is synchronous
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    MemoryStats s = memory_stats(device);
    c10::CachingDeviceAllocator::DeviceStats out;
    for (auto* arr : {&out.allocated_bytes, &out.reserved_bytes, &out.active_bytes, &out.requested_bytes}) {
      auto& stat = (*arr)[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
      stat.current = s.allocated;
      stat.peak = s.peak;
    }
    auto& count = out.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    count.current = s.num_allocs - s.num_frees;
    count.allocated = s.num_allocs;
    count.freed = s.num_frees;
    out.num_device_alloc = s.num_allocs;
    out.num_device_free = s.num_frees;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> g(g_mem);
    g_stats[check_index(device)].num_allocs = 0;
    g_stats[check_index(device)].num_frees = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    MemoryStats s = memory_stats(device);
    int64_t total = g_total_memory;
    return {static_cast<size_t>(std::max<int64_t>(total - s.allocated, 0)), static_cast<size_t>(total)};
  }
};
NeuronAllocator g_allocator;

// -- pinned host memory -------------------------------------------------------------------------------------
std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> g(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes > 0 ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> g(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return c10::DataPtr(ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }
};
PinnedAllocator g_pinned_allocator;
}  // namespace

c10::DeviceAllocator* device_allocator() { return &g_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool is_pinned_ptr(const void* ptr) {
  std::lock_guard<std::mutex> g(g_pinned_mutex);
  return g_pinned.count(ptr) > 0;
}

void set_total_memory(int64_t bytes) { g_total_memory = bytes; }

HostBlock* block_of(const c10::StorageImpl* storage) {
  if (storage == nullptr || storage->data_ptr().get_deleter() != &delete_block) return nullptr;
  return static_cast<HostBlock*>(storage->data_ptr().get_context());
}

c10::Storage adopt_host_storage(c10::intrusive_ptr<c10::StorageImpl> host, c10::DeviceIndex device,
                                c10::ScalarType dtype, c10::IntArrayRef shape) {
  Description d;
  d.valid = true;
  d.dtype = dtype;
  d.shape = shape.vec();
  size_t nbytes = host->nbytes();
  HostBlock* b = new_block(std::move(host), device, 0, &d);
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                            data_ptr_of(b), &g_allocator, /*resizable=*/true));
}

void follow_host(c10::StorageImpl* storage) {
  HostBlock* b = block_of(storage);
  if (b == nullptr) return;
  const auto& host = b->host;
  if (host->data() == storage->data() && static_cast<int64_t>(host->nbytes()) == b->nbytes) return;
  HostBlock* nb = new_block(host, b->device, b->root, nullptr);
  storage->set_nbytes(host->nbytes());
  storage->set_data_ptr_noswap(data_ptr_of(nb));  // frees block b
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  HostBlock* b = block_of(storage.unsafeGetStorageImpl());
  TORCH_CHECK(b != nullptr, "neuron: this storage was not allocated by the neuron device; it cannot be resized");
  TORCH_CHECK(storage.resizable(), "neuron: trying to resize a storage that is not resizable");
  at::native::resize_bytes_cpu(b->host.get(), nbytes);
  follow_host(storage.unsafeGetStorageImpl());
}

void describe_next_allocation(c10::ScalarType dtype, c10::IntArrayRef shape) {
  tl_description.valid = true;
  tl_description.dtype = dtype;
  tl_description.shape = shape.vec();
}

MemoryStats memory_stats(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> g(g_mem);
  return g_stats[check_index(device)];
}

void reset_peak(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> g(g_mem);
  auto& s = g_stats[check_index(device)];
  s.peak = s.allocated;
}

int64_t open_memory_log() {
  std::lock_guard<std::mutex> g(g_mem);
  OpenLog log;
  log.id = ++g_next_log;
  log.first_record = g_records.size();
  log.first_renewal = g_renewals.size();
  for (const auto& kv : g_live) log.baseline.emplace_back(kv.first, kv.second->device, kv.second->nbytes);
  std::sort(log.baseline.begin(), log.baseline.end());
  g_logs.push_back(std::move(log));
  return g_logs.back().id;
}

MemoryLogData close_memory_log(int64_t id) {
  std::lock_guard<std::mutex> g(g_mem);
  MemoryLogData out;
  for (auto it = g_logs.begin(); it != g_logs.end(); ++it) {
    if (it->id != id) continue;
    out.records.assign(g_records.begin() + it->first_record, g_records.end());
    out.renewed.assign(g_renewals.begin() + it->first_renewal, g_renewals.end());
    out.baseline = std::move(it->baseline);
    g_logs.erase(it);
    break;
  }
  if (g_logs.empty()) {
    g_records.clear();
    g_renewals.clear();
  }
  return out;
}

// -- generator ------------------------------------------------------------------------------------------------
namespace {
// A neuron generator is a CPU generator on the device: the device's random ops run CPU kernels, so it draws
// exactly what a CPU generator in the same state would. The default ones share the CPU default generator
// (torch.manual_seed(s) gives the same stream on `neuron` as on CPU).
struct NeuronGenerator final : c10::GeneratorImpl {
  at::Generator cpu;
  NeuronGenerator(c10::DeviceIndex index, at::Generator cpu_gen)
      : c10::GeneratorImpl(c10::Device(kNeuron, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu(std::move(cpu_gen)) {}
  void set_current_seed(uint64_t seed) override { cpu.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { cpu.set_offset(offset); }
  uint64_t get_offset() const override { return cpu.get_offset(); }
  uint64_t current_seed() const override { return cpu.current_seed(); }
  uint64_t seed() override { return cpu.seed(); }
  void set_state(const c10::TensorImpl& state) override { cpu.unsafeGetGeneratorImpl()->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu.unsafeGetGeneratorImpl()->get_state();
  }
  NeuronGenerator* clone_impl() const override { return new NeuronGenerator(device().index(), cpu.clone()); }
};

std::once_flag g_generators_once;
std::vector<at::Generator> g_default_generators;

const at::Generator& default_generator(c10::DeviceIndex index) {
  std::call_once(g_generators_once, [] {
    for (int i = 0; i < kMaxDevices; ++i) {
      g_default_generators.push_back(at::make_generator<NeuronGenerator>(
          static_cast<c10::DeviceIndex>(i), at::detail::getDefaultCPUGenerator()));
    }
  });
  return g_default_generators[check_index(index)];
}
}  // namespace

at::Generator cpu_generator_of(const at::Generator& gen) {
  if (!gen.defined() || gen.device().type() != kNeuron) return gen;
  return static_cast<NeuronGenerator*>(gen.unsafeGetGeneratorImpl())->cpu;
}

// -- device guard ---------------------------------------------------------------------------------------------
namespace {
// Execution is synchronous: one default stream per device; an event is the time it was recorded.
struct NeuronGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNeuron, tl_device); }
  void setDevice(c10::Device d) const override { tl_device = check_index(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) tl_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    if (*event == nullptr) *event = new int64_t(0);
    *static_cast<int64_t*>(*event) = now_ns();
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<int64_t*>(event);
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex device) const override;
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "neuron: both events must be recorded before elapsed_time");
    return static_cast<double>(*static_cast<int64_t*>(end) - *static_cast<int64_t*>(start)) / 1e6;
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};
}  // namespace

void record_sync(c10::DeviceIndex device, bool timing);  // NeuronRecorder.cpp

void NeuronGuardImpl::synchronizeDevice(const c10::DeviceIndex device) const {
  record_sync(check_index(device), false);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

// -- hooks ------------------------------------------------------------------------------------------------------
namespace {
struct NeuronHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return tl_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = tl_device;
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<NeuronGenerator>(check_index(index), at::detail::createCPUGenerator());
  }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kNeuron, tl_device); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};
}  // namespace

void register_runtime(int count, int64_t total_memory) {
  static std::once_flag once;
  set_device_count(count);
  set_total_memory(total_memory);
  std::call_once(once, [] {
    c10::SetAllocator(kNeuron, &g_allocator);
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  });
}

}  // namespace neuron
