// Python bindings of the emulated device (`neuron_studio.device.emulator._C`) and the op-event recorder.
//
// The recorder keeps one row per op (name, shapes, strides, dtypes, storages read/written, timing, sync and
// transfer codes, autograd flags and sequence numbers) in a bounded buffer while a subscriber listens; with
// `want_source` it also notes the innermost Python frame outside torch and the studio (code object + line).
// A drain hands the rows over as columns (`take_columns`): numeric arrays, one entry per row, plus the table of
// distinct op signatures (op, shapes, strides, dtypes, kept arguments) the rows point into, so Python does its
// per-op work (TorchNeuron's policies, FLOPs) once per signature (neuron_studio/device/emulator/op_events.py).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include <pthread.h>
#include <time.h>

#include "Neuron.h"

namespace neuron {

void register_runtime(int count, int64_t total_memory);                                  // NeuronRuntime.cpp
std::vector<std::string> register_direct_kernels(const std::vector<std::string>& exclude);  // NeuronKernels.cpp
extern std::function<void(const std::string&, c10::MemoryFormat)> g_memory_format_policy;

// -- clocks and threads -----------------------------------------------------------------------------------------
int64_t now_ns() {
  struct timespec ts;
#if defined(__APPLE__)
  clock_gettime(CLOCK_UPTIME_RAW, &ts);  // what time.perf_counter_ns reads on macOS
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);  // what time.perf_counter_ns reads on Linux
#endif
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

uint64_t thread_ident() { return reinterpret_cast<uint64_t>(reinterpret_cast<void*>(pthread_self())); }

// -- recorder state ---------------------------------------------------------------------------------------------
std::atomic<bool> g_recording{false};
namespace {
std::atomic<bool> g_want_source{false};
std::atomic<int64_t> g_seq{0};
std::atomic<int64_t> g_graph{-1};
thread_local bool tl_quiet = false;

struct Row {
  int64_t seq = 0, t0 = 0, t1 = 0, graph = -1, transfer_bytes = 0;
  uint64_t thread = 0;
  int device = 0;
  const OpInfo* op = nullptr;
  const char* marker = nullptr;
  int8_t sync = 0, transfer = 0;
  uint16_t n_in = 0, n_out = 0;
  std::vector<int64_t> dims;  // per tensor: ndim, sizes..., strides...
  std::vector<int8_t> dtypes;
  std::vector<int64_t> reads, writes;
  uint8_t flags = 0;
  int64_t autograd_seq = -1, fwd_seq = -1;
  c10::IValue args, outs;
  PyObject* code = nullptr;  // a strong reference, released under the GIL
  int line = 0;
};

std::mutex g_rows_mutex;
std::deque<Row> g_rows;
size_t g_capacity = 1;
int64_t g_dropped = 0;
std::vector<PyObject*> g_release;  // code objects of dropped rows, released under the GIL

std::vector<std::string> g_skip_dirs;
std::unordered_map<PyObject*, bool> g_skip_code;  // code object -> not user code (GIL held)

bool skip_code(PyCodeObject* code) {
  auto* key = reinterpret_cast<PyObject*>(code);
  auto it = g_skip_code.find(key);
  if (it != g_skip_code.end()) return it->second;
  bool skip = true;
  PyObject* fn = code->co_filename;
  const char* name = fn != nullptr ? PyUnicode_AsUTF8(fn) : nullptr;
  if (name != nullptr) {
    std::string s(name);
    skip = s.find("<frozen") != std::string::npos;
    for (const auto& d : g_skip_dirs)
      if (s.rfind(d, 0) == 0) skip = true;
  } else {
    PyErr_Clear();
  }
  Py_INCREF(key);  // the cache keeps the code object (and so its address) alive
  g_skip_code.emplace(key, skip);
  return skip;
}

void note_source(Row& row) {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(f);
    if (!skip_code(code)) {
      row.code = reinterpret_cast<PyObject*>(code);
      row.line = PyFrame_GetLineNumber(f);
      Py_DECREF(f);
      break;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  PyGILState_Release(st);
}

void describe(Row& row, const at::Tensor& t) {
  row.dims.push_back(t.dim());
  for (auto s : t.sizes()) row.dims.push_back(s);
  for (auto s : t.strides()) row.dims.push_back(s);
  row.dtypes.push_back(static_cast<int8_t>(t.scalar_type()));
}

void push(Row&& row) {
  std::lock_guard<std::mutex> g(g_rows_mutex);
  if (!g_recording.load(std::memory_order_relaxed)) {
    if (row.code != nullptr) g_release.push_back(row.code);
    return;
  }
  while (g_rows.size() >= g_capacity) {
    if (g_rows.front().code != nullptr) g_release.push_back(g_rows.front().code);
    g_rows.pop_front();
    ++g_dropped;
  }
  g_rows.push_back(std::move(row));
}
}  // namespace

bool quiet() { return tl_quiet; }
void set_quiet(bool q) { tl_quiet = q; }
int64_t next_seq() { return ++g_seq; }
int64_t last_seq() { return g_seq.load(std::memory_order_relaxed); }
void set_current_graph(int64_t graph) { g_graph = graph; }
int64_t current_graph() { return g_graph.load(std::memory_order_relaxed); }

void record(RecordedOp&& r) {
  Row row;
  row.op = r.op;
  row.marker = r.marker;
  row.t0 = r.t0;
  row.t1 = r.t1;
  row.device = r.device;
  row.sync = r.sync;
  row.transfer = r.transfer;
  row.transfer_bytes = r.transfer_bytes;
  row.thread = thread_ident();
  row.graph = current_graph();
  row.n_in = static_cast<uint16_t>(r.inputs.size());
  row.n_out = static_cast<uint16_t>(r.outputs.size());
  for (const auto& t : r.inputs) describe(row, t);
  for (const auto& t : r.outputs) describe(row, t);
  row.reads = std::move(r.reads);
  row.writes = std::move(r.writes);
  row.flags = r.flags;
  row.autograd_seq = r.autograd_seq;
  row.fwd_seq = r.fwd_seq;
  row.args = std::move(r.args);
  row.outs = std::move(r.outs);
  if (r.user_line && g_want_source.load(std::memory_order_relaxed)) note_source(row);
  row.seq = next_seq();
  push(std::move(row));
}

void record_sync(c10::DeviceIndex device, bool timing) {
  if (!g_recording.load(std::memory_order_relaxed) || tl_quiet) return;
  RecordedOp r;
  r.marker = "neuron::synchronize";
  r.t0 = r.t1 = now_ns();
  r.device = device;
  r.sync = 4;
  r.user_line = false;  // a sync is the device's, not a line of the program (the profiler's own sync is too)
  if (timing) r.flags |= kFlagTimingSync;
  record(std::move(r));
}

void ensure_cpu_backend(const c10::IValue& v) {
  // The c10d ops run on CPU aliases, so the group's CPU backend does the work: a group made for the
  // accelerator only (init_process_group() with no backend) gets the neuron device's backend (gloo) for CPU.
  try {
    auto pg = v.toCustomClass<c10d::ProcessGroup>();
    if (!pg->hasBackendForDeviceType(c10::DeviceType::CPU) && pg->hasBackendForDeviceType(kNeuron)) {
      pg->setBackend(c10::DeviceType::CPU, pg->getBackendType(), pg->getBackend(kNeuron));
    }
  } catch (const c10::Error&) {
  }
}

namespace {
// -- Python conversions ---------------------------------------------------------------------------------------------
// ScalarType -> "float32"; Python objects held for the process (never destroyed after the interpreter is gone)
std::vector<py::object>& g_dtype_names = *new std::vector<py::object>();
const char* kSyncNames[] = {nullptr, "item", "to_host", "data_dependent", "synchronize", "print"};
const char* kTransferNames[] = {nullptr, "h2d", "d2h"};

py::object dtype_name(int8_t st) {
  if (st >= 0 && static_cast<size_t>(st) < g_dtype_names.size() && g_dtype_names[st]) return g_dtype_names[st];
  return py::str("unknown");
}

py::object name_of(const OpInfo* op, bool overload) {
  auto*& slot = overload ? const_cast<OpInfo*>(op)->py_overload : const_cast<OpInfo*>(op)->py_name;
  if (slot == nullptr) {
    PyObject* s = PyUnicode_FromString(overload ? op->overload.c_str() : op->name.c_str());
    PyUnicode_InternInPlace(&s);
    slot = s;  // kept for the process
  }
  return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(slot));
}

PyObject* int_tuple(const int64_t* v, size_t n) {  // new reference
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(n));
  for (size_t i = 0; i < n; ++i) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(v[i]));
  return t;
}

py::tuple int_tuple(const std::vector<int64_t>& v) {
  return py::reinterpret_steal<py::tuple>(int_tuple(v.data(), v.size()));
}

PyObject* new_ref(const py::object& o) {
  Py_INCREF(o.ptr());
  return o.ptr();
}

PyObject* new_ref(PyObject* o) {
  Py_INCREF(o);
  return o;
}

std::vector<std::string>& g_conversion_errors = *new std::vector<std::string>();

// Kept argument metadata as Python objects; None (no FLOPs, no hook fields) if an argument cannot be converted.
PyObject* kept_to_python(const c10::IValue& v, const Row& row) {
  if (v.isNone()) return new_ref(Py_None);
  try {
    return torch::jit::toPyObject(v).release().ptr();
  } catch (const std::exception& e) {
    if (g_conversion_errors.size() < 32)
      g_conversion_errors.push_back((row.op != nullptr ? row.op->name : std::string("?")) + ": " + e.what());
    return new_ref(Py_None);
  }
}

// The signature of one row's op as the tuple neuron_studio/device/emulator/op_events.py unpacks: what rows
// with equal keys (`signature_key`) share.
py::tuple signature_tuple(const Row& row) {
  const size_t n = static_cast<size_t>(row.n_in) + row.n_out;
  PyObject* in_shapes = PyTuple_New(row.n_in);
  PyObject* in_strides = PyTuple_New(row.n_in);
  PyObject* in_dtypes = PyTuple_New(row.n_in);
  PyObject* out_shapes = PyTuple_New(row.n_out);
  PyObject* out_dtypes = PyTuple_New(row.n_out);
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t nd = static_cast<size_t>(row.dims[k++]);
    PyObject* dt = new_ref(dtype_name(row.dtypes[i]));
    if (i < row.n_in) {
      PyTuple_SET_ITEM(in_shapes, i, int_tuple(&row.dims[k], nd));
      PyTuple_SET_ITEM(in_strides, i, int_tuple(&row.dims[k + nd], nd));
      PyTuple_SET_ITEM(in_dtypes, i, dt);
    } else {
      PyTuple_SET_ITEM(out_shapes, i - row.n_in, int_tuple(&row.dims[k], nd));
      PyTuple_SET_ITEM(out_dtypes, i - row.n_in, dt);
    }
    k += 2 * nd;
  }
  PyObject* name = row.op != nullptr ? new_ref(name_of(row.op, false)) : PyUnicode_FromString(row.marker);
  PyObject* overload = row.op != nullptr ? new_ref(name_of(row.op, true)) : PyUnicode_FromString("default");
  PyObject* args = kept_to_python(row.args, row);
  PyObject* outs = kept_to_python(row.outs, row);
  const bool is_view = row.op != nullptr && row.op->is_view;
  const bool is_inplace = row.op != nullptr && row.op->is_inplace;
  auto name_or_none = [](const char* s) { return s == nullptr ? new_ref(Py_None) : PyUnicode_InternFromString(s); };
  PyObject* t = PyTuple_New(15);
  PyTuple_SET_ITEM(t, 0, name);
  PyTuple_SET_ITEM(t, 1, overload);
  PyTuple_SET_ITEM(t, 2, in_shapes);
  PyTuple_SET_ITEM(t, 3, in_dtypes);
  PyTuple_SET_ITEM(t, 4, out_shapes);
  PyTuple_SET_ITEM(t, 5, out_dtypes);
  PyTuple_SET_ITEM(t, 6, in_strides);
  PyTuple_SET_ITEM(t, 7, PyBool_FromLong(is_view));
  PyTuple_SET_ITEM(t, 8, PyBool_FromLong(is_inplace));
  PyTuple_SET_ITEM(t, 9, name_or_none(kSyncNames[row.sync]));
  PyTuple_SET_ITEM(t, 10, name_or_none(kTransferNames[row.transfer]));
  PyTuple_SET_ITEM(t, 11, PyBool_FromLong(row.graph >= 0));
  PyTuple_SET_ITEM(t, 12, PyBool_FromLong(row.op == nullptr));
  PyTuple_SET_ITEM(t, 13, args);
  PyTuple_SET_ITEM(t, 14, outs);
  return py::reinterpret_steal<py::tuple>(t);
}

template <typename T>
void put(std::string& k, const T& v) {
  k.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Appends a kept argument's identity to a signature key: values, and tensors' metadata (kept arguments hold
// meta tensors); a custom-class object (a process group) by its address. False for a value it cannot name
// (the row then gets a signature of its own).
bool put_ivalue(std::string& k, const c10::IValue& v) {
  if (v.isNone()) {
    k.push_back('N');
  } else if (v.isBool()) {
    k.push_back('b');
    put(k, static_cast<int8_t>(v.toBool()));
  } else if (v.isInt()) {
    k.push_back('i');
    put(k, v.toInt());
  } else if (v.isDouble()) {
    k.push_back('d');
    put(k, v.toDouble());
  } else if (v.isString()) {
    const auto& s = v.toStringRef();
    k.push_back('s');
    put(k, static_cast<int64_t>(s.size()));
    k.append(s);
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      k.push_back('u');
      return true;
    }
    if (t.layout() != at::kStrided) return false;
    k.push_back('t');
    put(k, static_cast<int64_t>(t.dim()));
    for (auto x : t.sizes()) put(k, static_cast<int64_t>(x));
    for (auto x : t.strides()) put(k, static_cast<int64_t>(x));
    put(k, static_cast<int8_t>(t.scalar_type()));
    put(k, static_cast<int8_t>(t.device().type()));
  } else if (v.isDevice()) {
    k.push_back('D');
    put(k, static_cast<int8_t>(v.toDevice().type()));
    put(k, static_cast<int8_t>(v.toDevice().index()));
  } else if (v.isList()) {
    auto list = v.toListRef();
    k.push_back('L');
    put(k, static_cast<int64_t>(list.size()));
    for (const auto& e : list)
      if (!put_ivalue(k, e)) return false;
  } else if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    k.push_back('T');
    put(k, static_cast<int64_t>(elems.size()));
    for (const auto& e : elems)
      if (!put_ivalue(k, e)) return false;
  } else if (v.isObject() || v.isCapsule()) {
    k.push_back('O');
    put(k, reinterpret_cast<uintptr_t>(v.internalToPointer()));
  } else {
    return false;
  }
  return true;
}

// The key of a row's signature: everything of the row Python turns into per-op fields once per signature.
void signature_key(std::string& k, const Row& row, size_t index) {
  k.clear();
  put(k, reinterpret_cast<uintptr_t>(row.op != nullptr ? static_cast<const void*>(row.op)
                                                        : static_cast<const void*>(row.marker)));
  put(k, row.sync);
  put(k, row.transfer);
  put(k, static_cast<int8_t>(row.graph >= 0));
  put(k, row.n_in);
  put(k, row.n_out);
  k.append(reinterpret_cast<const char*>(row.dims.data()), row.dims.size() * sizeof(int64_t));
  k.append(reinterpret_cast<const char*>(row.dtypes.data()), row.dtypes.size());
  if (row.op != nullptr && row.op->keep_args) {
    bool named = false;
    try {
      named = put_ivalue(k, row.args) && put_ivalue(k, row.outs);
    } catch (const std::exception&) {
      named = false;
    }
    if (!named) {
      k.push_back('!');
      put(k, static_cast<int64_t>(index));  // unique: not shared with any other row
    }
  }
}

template <typename T>
py::bytes column(const std::vector<T>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

void release_pending() {  // GIL held
  std::vector<PyObject*> pending;
  {
    std::lock_guard<std::mutex> g(g_rows_mutex);
    pending.swap(g_release);
  }
  for (auto* o : pending) Py_DECREF(o);
}

// The rows recorded since the last call, as columns (raw native-endian bytes, read with numpy.frombuffer):
// per row seq, t0, t1, thread, graph, transfer_bytes, autograd_seq, fwd_seq (int64), device, sig, source
// (int32: indexes into `signatures` / `sources`, -1 no source), flags (uint8), and the storages read and
// written as flat int64 lists with n+1 offsets; `signatures` one tuple per distinct op signature
// (signature_tuple), `sources` one (filename, line) per distinct source line; `dropped` rows lost meanwhile.
py::dict take_columns() {
  std::deque<Row> rows;
  int64_t dropped;
  {
    std::lock_guard<std::mutex> g(g_rows_mutex);
    rows.swap(g_rows);
    dropped = g_dropped;
    g_dropped = 0;
  }
  release_pending();
  const size_t n = rows.size();
  std::vector<int64_t> seq(n), t0(n), t1(n), thread(n), graph(n), tbytes(n), aseq(n), fseq(n);
  std::vector<int64_t> roff(n + 1, 0), woff(n + 1, 0), reads, writes;
  std::vector<int32_t> device(n), sig(n), source(n);
  std::vector<uint8_t> flags(n);
  std::unordered_map<std::string, int32_t> sig_index;
  std::vector<const Row*> sig_rows;
  std::map<std::pair<PyObject*, int>, int32_t> source_index;
  std::vector<std::pair<PyObject*, int>> source_list;
  std::string key;
  key.reserve(256);
  size_t i = 0;
  for (const Row& row : rows) {
    seq[i] = row.seq;
    t0[i] = row.t0;
    t1[i] = row.t1;
    thread[i] = static_cast<int64_t>(row.thread);
    graph[i] = row.graph;
    tbytes[i] = row.transfer_bytes;
    aseq[i] = row.autograd_seq;
    fseq[i] = row.fwd_seq;
    device[i] = row.device;
    flags[i] = row.flags;
    reads.insert(reads.end(), row.reads.begin(), row.reads.end());
    writes.insert(writes.end(), row.writes.begin(), row.writes.end());
    roff[i + 1] = static_cast<int64_t>(reads.size());
    woff[i + 1] = static_cast<int64_t>(writes.size());
    signature_key(key, row, i);
    auto it = sig_index.find(key);
    if (it == sig_index.end()) {
      it = sig_index.emplace(key, static_cast<int32_t>(sig_rows.size())).first;
      sig_rows.push_back(&row);
    }
    sig[i] = it->second;
    source[i] = -1;
    if (row.code != nullptr) {
      auto s = source_index.emplace(std::make_pair(row.code, row.line), static_cast<int32_t>(source_list.size()));
      if (s.second) source_list.emplace_back(row.code, row.line);
      source[i] = s.first->second;
    }
    ++i;
  }
  py::list signatures(sig_rows.size());
  for (size_t j = 0; j < sig_rows.size(); ++j) signatures[j] = signature_tuple(*sig_rows[j]);
  py::list sources(source_list.size());
  for (size_t j = 0; j < source_list.size(); ++j) {
    auto* code = reinterpret_cast<PyCodeObject*>(source_list[j].first);
    sources[j] = py::make_tuple(py::reinterpret_borrow<py::object>(code->co_filename), source_list[j].second);
  }
  for (Row& row : rows) {
    if (row.code != nullptr) Py_DECREF(row.code);
    row.code = nullptr;
  }
  py::dict out;
  out["n"] = n;
  out["dropped"] = dropped;
  out["seq"] = column(seq);
  out["t0"] = column(t0);
  out["t1"] = column(t1);
  out["thread"] = column(thread);
  out["graph"] = column(graph);
  out["transfer_bytes"] = column(tbytes);
  out["autograd_seq"] = column(aseq);
  out["fwd_seq"] = column(fseq);
  out["device"] = column(device);
  out["sig"] = column(sig);
  out["source"] = column(source);
  out["flags"] = column(flags);
  out["reads_offsets"] = column(roff);
  out["reads"] = column(reads);
  out["writes_offsets"] = column(woff);
  out["writes"] = column(writes);
  out["signatures"] = signatures;
  out["sources"] = sources;
  return out;
}

void set_recording(bool active, bool want_source, int64_t capacity) {
  {
    std::lock_guard<std::mutex> g(g_rows_mutex);
    g_capacity = static_cast<size_t>(std::max<int64_t>(capacity, 1));
    if (!active) {
      for (auto& r : g_rows)
        if (r.code != nullptr) g_release.push_back(r.code);
      g_rows.clear();
      g_dropped = 0;
    }
    g_want_source = want_source;
    g_recording = active;
  }
  release_pending();
}

void record_marker(const std::string& name, const at::Tensor& t, int8_t sync, int64_t transfer_bytes) {
  if (!g_recording.load(std::memory_order_relaxed) || tl_quiet) return;
  static std::mutex names_mutex;
  static std::deque<std::string> names;  // markers are few: keep their names for the rows
  const char* marker;
  {
    std::lock_guard<std::mutex> g(names_mutex);
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      names.push_back(name);
      it = names.end() - 1;
    }
    marker = it->c_str();
  }
  RecordedOp r;
  r.marker = marker;
  r.t0 = r.t1 = now_ns();
  r.device = t.defined() && t.device().type() == kNeuron ? t.device().index() : current_device();
  r.sync = sync;
  r.transfer = 2;
  r.transfer_bytes = transfer_bytes;
  if (t.defined()) r.inputs.push_back(t);
  record(std::move(r));
}

py::object memory_log_data(int64_t id) {
  MemoryLogData d = close_memory_log(id);
  py::list records(d.records.size());
  size_t i = 0;
  for (auto& r : d.records) {
    py::object dtype = py::none();
    if (r.dtype >= 0)
      dtype = py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(r.dtype))));
    py::object shape = r.has_shape ? py::object(int_tuple(r.shape)) : py::none();
    records[i++] = py::make_tuple(r.kind, r.id, static_cast<int>(r.device), r.nbytes, r.time_ns, r.after_seq,
                                  r.thread, dtype, shape);
  }
  py::list baseline;
  for (auto& b : d.baseline)
    baseline.append(py::make_tuple(std::get<0>(b), static_cast<int>(std::get<1>(b)), std::get<2>(b)));
  py::dict renewed;
  for (auto& p : d.renewed) renewed[py::int_(p.first)] = py::int_(p.second);
  return py::make_tuple(records, baseline, renewed);
}
}  // namespace

}  // namespace neuron

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace neuron;
  m.doc() = "The emulated neuron device (PrivateUse1): runtime, kernels and op-event recorder.";
  // What the Python side expects of this module (neuron_studio/device/emulator/native.py: INTERFACE); raised
  // whenever a binding the Python side calls changes, so a build from older sources is named, not misused.
  m.attr("INTERFACE") = 2;
  m.def("_register", [](int count, int64_t total_memory, const std::vector<std::string>& exclude) {
    register_runtime(count, total_memory);
    for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
      auto st = static_cast<c10::ScalarType>(i);
      py::object name = py::none();
      try {
        py::object dt = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(st)));
        std::string s = py::str(dt);
        if (s.rfind("torch.", 0) == 0) s = s.substr(6);
        name = py::str(s);
      } catch (...) {
        PyErr_Clear();
      }
      g_dtype_names.push_back(name);
    }
    return register_direct_kernels(exclude);
  });
  m.def("device_count", &device_count);
  m.def("current_device", []() { return static_cast<int>(current_device()); });
  m.def("set_device", [](int64_t index) { set_current_device(check_index(index)); });
  m.def("check_index", [](int64_t index) { return static_cast<int>(check_index(index)); });
  m.def("synchronize", [](int64_t index, bool timing) { record_sync(check_index(index), timing); });
  m.def("memory_stats", [](int64_t index) {
    MemoryStats s = memory_stats(check_index(index));
    return py::make_tuple(s.allocated, s.peak, s.num_allocs, s.num_frees);
  });
  m.def("reset_peak", [](int64_t index) { reset_peak(check_index(index)); });
  m.def("open_memory_log", &open_memory_log);
  m.def("close_memory_log", &memory_log_data);
  m.def("storage_alloc_id", [](const at::Tensor& t) -> py::object {
    if (!t.defined() || !t.has_storage()) return py::none();
    HostBlock* b = block_of(t.storage().unsafeGetStorageImpl());
    if (b == nullptr || b->nbytes == 0) return py::none();
    return py::int_(b->id);
  });
  m.def("set_recording", &set_recording);
  m.def("take_columns", &take_columns);
  m.def("set_quiet", [](bool q) {
    bool prev = quiet();
    set_quiet(q);
    return prev;
  });
  m.def("record_marker", &record_marker);
  // RNG of the device: the CPU default generator (see runtime.py). Builtins, so torch.compile graph-breaks on
  // them as on CPU's own generator calls instead of tracing into them.
  auto cpu_gen = []() { return at::detail::getDefaultCPUGenerator(); };
  auto unpack_seed = [](py::handle seed) -> uint64_t {
    py::int_ v = py::int_(py::reinterpret_borrow<py::object>(seed));
    py::int_ masked = v.attr("__and__")(py::int_(py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(~0ULL))));
    return PyLong_AsUnsignedLongLong(masked.ptr());
  };
  m.def("manual_seed", [cpu_gen, unpack_seed](py::handle seed) {
    uint64_t s = unpack_seed(seed);
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s);
  }, py::arg("seed"));
  m.def("manual_seed_all", [cpu_gen, unpack_seed](py::handle seed) {
    uint64_t s = unpack_seed(seed);
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s);
  }, py::arg("seed"));
  m.def("seed", [cpu_gen]() {
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.seed();
  });
  m.def("seed_all", [cpu_gen]() {
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.seed();
  });
  m.def("initial_seed", [cpu_gen]() {
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.current_seed();
  });
  m.def("get_rng_state", [cpu_gen](py::object) {
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.get_state();
  }, py::arg("device") = py::none());
  m.def("set_rng_state", [cpu_gen](const at::Tensor& state, py::object) {
    auto g = cpu_gen();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  }, py::arg("new_state"), py::arg("device") = py::none());
  m.def("conversion_errors", []() { return g_conversion_errors; });
  m.def("set_current_graph", &set_current_graph);
  m.def("current_graph", &current_graph);
  m.def("last_seq", &last_seq);
  m.def("set_skip_dirs", [](const std::vector<std::string>& dirs) { g_skip_dirs = dirs; });
  m.def("set_keep_args_ops", &set_keep_args_ops);
  m.def("set_memory_format_policy", [](py::object fn) {
    auto* holder = new py::object(std::move(fn));  // held for the process (see g_dtype_names)
    g_memory_format_policy = [holder](const std::string& op, c10::MemoryFormat mf) {
      py::gil_scoped_acquire gil;
      const char* name = mf == c10::MemoryFormat::ChannelsLast ? "channels_last" : "channels_last_3d";
      (*holder)(op, name);  // raises the studio's typed error when TorchNeuron rejects the format
    };
  });
}
