// The emulated `neuron` device: a PrivateUse1 backend whose device memory is host memory.
//
// Shared declarations of the runtime (NeuronRuntime.cpp: allocators, guard, hooks, generator), the op
// kernels (NeuronKernels.cpp: the boxed kernel that runs CPU kernels on aliases of the same bytes) and the
// op-event recorder (NeuronRecorder.cpp). Module.cpp binds them to Python.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace neuron {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// -- device ordinals (NeuronRuntime.cpp) ----------------------------------------------------------------
int device_count();
void set_device_count(int count);
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
// A valid ordinal for `index` (-1: the current device); throws naming the valid range otherwise.
c10::DeviceIndex check_index(int64_t index);
// Called by the kernels on every thread that runs neuron ops: that thread's backward runs on it, as CPU's does
// (why: NeuronRuntime.cpp).
void backward_on_calling_thread();

// -- memory (NeuronRuntime.cpp) ---------------------------------------------------------------------------
// What a neuron storage's DataPtr context is: the CPU storage that owns the bytes, and the allocation's
// identity. Every allocation (and every re-allocation by a resize) is one block with a new id; `root` links
// the blocks of one storage (FSDP2 frees and re-gathers parameters by resizing their storage).
struct HostBlock {
  c10::intrusive_ptr<c10::StorageImpl> host;
  int64_t id = 0;
  int64_t root = 0;
  int64_t nbytes = 0;
  c10::DeviceIndex device = 0;
};

c10::DeviceAllocator* device_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);
// The block behind a neuron storage, or nullptr for a storage this allocator did not make.
HostBlock* block_of(const c10::StorageImpl* storage);
// A new neuron storage on `device` over the bytes of CPU storage `host` (no copy). `dtype`/`shape` describe
// it in the memory log.
c10::Storage adopt_host_storage(c10::intrusive_ptr<c10::StorageImpl> host, c10::DeviceIndex device,
                                c10::ScalarType dtype, c10::IntArrayRef shape);
// After the CPU storage behind `storage` was re-allocated (a resize by a CPU kernel): point the neuron
// storage at its new bytes (a new block of the same storage).
void follow_host(c10::StorageImpl* storage);
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);
// Describe the next allocation made on this thread (empty kernels know dtype and shape; the allocator not).
void describe_next_allocation(c10::ScalarType dtype, c10::IntArrayRef shape);

struct MemoryStats {
  int64_t allocated = 0, peak = 0, num_allocs = 0, num_frees = 0;
};
MemoryStats memory_stats(c10::DeviceIndex device);
void reset_peak(c10::DeviceIndex device);

// One allocation or free while a memory log is open (see profiler/memory_capture.py).
struct MemoryRecord {
  int8_t kind;  // 1 allocation, -1 free
  int64_t id, nbytes, time_ns, after_seq;
  c10::DeviceIndex device;
  uint64_t thread;
  int8_t dtype;  // -1 when unknown (frees)
  std::vector<int64_t> shape;
  bool has_shape = false;
};
struct MemoryLogData {
  std::vector<MemoryRecord> records;
  std::vector<std::tuple<int64_t, c10::DeviceIndex, int64_t>> baseline;  // live when opened
  std::vector<std::pair<int64_t, int64_t>> renewed;                        // block id -> root id
};
int64_t open_memory_log();
MemoryLogData close_memory_log(int64_t log);

// -- generator (NeuronRuntime.cpp) ----------------------------------------------------------------------
// The CPU generator a neuron generator draws from (CPU kernels run the device's ops).
at::Generator cpu_generator_of(const at::Generator& gen);

// -- recorder (NeuronRecorder.cpp) ------------------------------------------------------------------------
int64_t now_ns();  // the clock of Python's time.perf_counter_ns
uint64_t thread_ident();  // Python's threading.get_ident()
int64_t next_seq();
int64_t last_seq();
extern std::atomic<bool> g_recording;  // a subscriber listens
bool quiet();                          // this thread's ops are not the program's (printing, ...)
void set_quiet(bool q);

// What the kernels and the recorder need to know about an operator, computed once.
struct OpInfo {
  const c10::FunctionSchema* schema = nullptr;
  std::string name;      // "aten::add"
  std::string overload;  // "Tensor" ("default" when empty)
  size_t nargs = 0;
  size_t nrets = 0;
  bool is_view = false, is_inplace = false;
  bool copy_op = false, index_op = false, data_dependent = false, local_scalar = false;
  bool to_copy = false, copy_from = false, copy_inplace = false, bool_index = false, c10d = false;
  bool keep_args = false;  // the recorder keeps the arguments' metadata (FLOP formulas, attention, collectives)
  int device_arg = -1, memory_format_arg = -1;
  std::vector<uint8_t> written;     // per argument: the schema marks it written
  std::vector<uint8_t> kwarg_only;  // per argument
  std::vector<uint8_t> ret_fresh;   // per return: not an alias of an argument
  void* py_name = nullptr;          // interned Python strings (NeuronRecorder.cpp)
  void* py_overload = nullptr;
};
const OpInfo& op_info(const c10::OperatorHandle& op);
void set_keep_args_ops(const std::vector<std::string>& names);

// Row flags (the profiler reads them as the tags "deterministic", "backward", "timing_sync").
constexpr uint8_t kFlagDeterministic = 1, kFlagBackward = 2, kFlagTimingSync = 4;

// Arguments/outputs of one op as the recorder sees them (tensor metadata only; values for kept args).
struct RecordedOp {
  const OpInfo* op = nullptr;
  const char* marker = nullptr;  // a host-visible event that is no aten op ("aten::_print")
  int64_t t0 = 0, t1 = 0;
  c10::DeviceIndex device = 0;
  int8_t sync = 0, transfer = 0;  // codes: see Module.cpp (SYNC_NAMES, TRANSFER_NAMES)
  int64_t transfer_bytes = 0;
  std::vector<at::Tensor> inputs, outputs;  // described, never kept
  std::vector<int64_t> reads, writes;
  uint8_t flags = 0;          // kFlag* below
  int64_t autograd_seq = -1;  // forward op under grad mode: the sequence number of the backward node it made
  int64_t fwd_seq = -1;       // backward op: the sequence number of the forward op its node differentiates
  bool user_line = true;      // the user's source line is noted when asked (not for the device's own syncs)
  c10::IValue args;  // kept arguments (tensors replaced by their metadata) when op->keep_args
  c10::IValue outs;
};
void record(RecordedOp&& r);
// Storage ids for reads/writes: a neuron storage's block id; CPU storages get ids of their own.
int64_t storage_id(const at::Tensor& t, bool fresh);
void set_current_graph(int64_t graph);
int64_t current_graph();

}  // namespace neuron
