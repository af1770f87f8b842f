// Op kernels of the `neuron` device. Device bytes are host bytes, so an op runs as the CPU kernel on CPU
// tensors that alias the neuron tensors' storages (no copies); its outputs become neuron tensors over the
// same bytes. One boxed kernel does this for every op: registered as the PrivateUse1 fallback, and directly
// for the ops whose PrivateUse1 entry would otherwise not be CPU's (CompositeExplicitAutograd ops, kept whole
// as CPU runs them; CompositeImplicitAutograd ops that have a CPU kernel, which CPU runs instead of the
// decomposition: silu_backward, mish_backward, ...; the c10d collectives, run on gloo). A minimal set of
// kernels makes tensors exist (empty, empty_strided, _copy_from, _copy_from_and_resize), as OpenReg's
// OpenRegMinimal.cpp does.
#include "Neuron.h"

#include <ATen/EmptyTensor.h>
#include <ATen/SequenceNumber.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/node.h>
#include <torch/library.h>

#include <functional>
#include <mutex>
#include <unordered_map>

namespace torch::autograd {
TORCH_API int get_current_graph_task_id();
}

namespace neuron {

std::function<void(const std::string&, c10::MemoryFormat)> g_memory_format_policy;  // set by Module.cpp
void ensure_cpu_backend(const c10::IValue& process_group);                           // Module.cpp

enum SyncCode : int8_t { kNoSync = 0, kSyncItem = 1, kSyncToHost = 2, kSyncDataDependent = 3 };
enum TransferCode : int8_t { kNoTransfer = 0, kH2D = 1, kD2H = 2 };

namespace {

// -- per-op facts ------------------------------------------------------------------------------------------------
std::mutex g_ops_mutex;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> g_ops;
std::vector<std::string> g_keep_args;
thread_local std::unordered_map<const c10::FunctionSchema*, const OpInfo*> tl_ops;

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

std::unique_ptr<OpInfo> make_info(const c10::FunctionSchema& schema) {
  auto info = std::make_unique<OpInfo>();
  info->schema = &schema;
  info->name = schema.name();
  info->overload = schema.overload_name().empty() ? "default" : schema.overload_name();
  const auto& args = schema.arguments();
  info->nargs = args.size();
  info->nrets = schema.returns().size();
  info->is_inplace = schema.is_mutable();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = args[i].alias_info();
    info->written.push_back(alias != nullptr && alias->isWrite());
    info->kwarg_only.push_back(args[i].kwarg_only());
    if (alias != nullptr && !alias->isWrite()) info->is_view = true;
    if (args[i].name() == "device") info->device_arg = static_cast<int>(i);
    if (args[i].name() == "memory_format") info->memory_format_arg = static_cast<int>(i);
  }
  for (const auto& r : schema.returns()) info->ret_fresh.push_back(r.alias_info() == nullptr);
  const std::string full = info->name + "." + info->overload;
  const std::string& n = info->name;
  info->to_copy = full == "aten::_to_copy.default";
  info->copy_from = one_of(n, {"aten::_copy_from", "aten::_copy_from_and_resize"});
  info->copy_inplace = full == "aten::copy_.default";
  info->copy_op = info->to_copy || info->copy_from || info->copy_inplace ||
                  one_of(full, {"aten::copy.default", "aten::set_.source_Tensor", "aten::lift_fresh.default"});
  info->index_op = one_of(full, {"aten::index.Tensor", "aten::index_put_.default", "aten::index_put.default",
                                 "aten::_index_put_impl_.default"});
  info->data_dependent = one_of(full, {"aten::nonzero.default", "aten::masked_select.default",
                                       "aten::_unique2.default", "aten::unique_dim.default",
                                       "aten::unique_consecutive.default", "aten::_unique.default",
                                       "aten::repeat_interleave.Tensor"});
  info->bool_index = full == "aten::index.Tensor";
  info->local_scalar = n == "aten::_local_scalar_dense";
  info->c10d = n.rfind("c10d::", 0) == 0;
  for (const auto& k : g_keep_args)
    if (k == n || k == full) info->keep_args = true;
  if (info->c10d) info->keep_args = true;
  return info;
}

// -- the CPU view of a call --------------------------------------------------------------------------------------
struct Entry {
  at::Tensor orig;   // the neuron tensor
  at::Tensor alias;  // a CPU tensor over the same bytes
  c10::StorageImpl* storage;
  c10::StorageImpl* host;
  bool written;
};

struct Call {
  const OpInfo* info;
  std::vector<Entry> tensors;
  std::vector<c10::TensorImpl*> host_inputs;  // CPU tensors passed in (returned as they are)
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> storages;  // host storage -> neuron storage
  int device = -1;
  int target = -1;
  bool host_tensor = false;
  bool to_host = false;
  bool record = false;
  std::vector<at::Tensor> described;  // positional tensor arguments, in order (recording only)
  std::vector<at::Tensor> all_tensors;  // every tensor argument (recording only)
  std::vector<at::Tensor> written_tensors;
};

void check_not_quantized(bool quantized) {
  TORCH_CHECK(!quantized,
              "neuron: quantized tensors (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2) are not supported "
              "on the emulated neuron device (it has no quantized kernels); keep them on the CPU, or dequantize() "
              "before moving to neuron (for low precision on the device use torch.bfloat16 or the float8 dtypes)");
}

void raise_quantized(const c10::OperatorHandle&, torch::jit::Stack*) { check_not_quantized(true); }

const char* layout_name(c10::Layout layout) {
  switch (layout) {
    case c10::Layout::Sparse: return "torch.sparse_coo";
    case c10::Layout::SparseCsr: return "torch.sparse_csr";
    case c10::Layout::SparseCsc: return "torch.sparse_csc";
    case c10::Layout::SparseBsr: return "torch.sparse_bsr";
    case c10::Layout::SparseBsc: return "torch.sparse_bsc";
    case c10::Layout::Jagged: return "torch.jagged";
    default: return "non-strided";
  }
}

[[noreturn]] void raise_layout(const char* name) {
  TORCH_CHECK(false, "neuron: ", name, " tensors are not supported on the neuron device (TorchNeuron supports dense "
              "strided tensors only); keep sparse tensors on the CPU");
}

void raise_sparse(const c10::OperatorHandle&, torch::jit::Stack*) { raise_layout("torch.sparse_coo"); }
void raise_sparse_compressed(const c10::OperatorHandle&, torch::jit::Stack*) {
  raise_layout("sparse compressed (torch.sparse_csr/csc/bsr/bsc)");
}

[[noreturn]] void raise_mixed(const std::string& a, const std::string& b, const OpInfo* info) {
  const std::string op = info->overload == "default" ? info->name : info->name + "." + info->overload;
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ",
              b, "! (when checking arguments for ", op, ")");
}

c10::intrusive_ptr<c10::StorageImpl> host_of(c10::StorageImpl* storage) {
  HostBlock* b = block_of(storage);
  if (b != nullptr) return b->host;
  // a neuron storage made elsewhere (from a data pointer): alias its bytes without owning them
  void* data = storage->_mutable_data_ptr_no_checks().get();
  auto host = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage->sym_nbytes(),
      c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)), nullptr, /*resizable=*/false);
  if (data == nullptr && (storage->sym_nbytes().is_heap_allocated() || storage->nbytes() > 0)) {
    // a tensor subclass's storage that has no bytes (FunctionalTensor and FakeTensor wrappers while torch.compile
    // traces): metadata ops (unsqueeze_, as_strided_, ...) run on it as on a CPU wrapper, and reading or writing
    // its data raises as it does on CPU ("Cannot access data pointer of Tensor ...")
    host->release_data_and_set_meta_custom_data_ptr_error_msg_(std::nullopt);
  }
  return host;
}

at::Tensor cpu_alias(const at::Tensor& t, const c10::intrusive_ptr<c10::StorageImpl>& host) {
  at::Tensor a = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(host),
                                                           c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  a.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.is_conj()) a._set_conj(true);
  if (t.is_neg()) a._set_neg(true);
  return a;
}

at::Tensor alias_in_call(const at::Tensor& t, Call& c, bool written) {
  TORCH_CHECK(t.has_storage(), "neuron: a tensor without storage reached the neuron device");
  int idx = t.device().index();
  if (c.device < 0) {
    c.device = idx;
  } else if (c.device != idx && !c.info->copy_op) {  // copies move data between devices
    raise_mixed("neuron:" + std::to_string(c.device), "neuron:" + std::to_string(idx), c.info);
  }
  c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  auto host = host_of(st);
  at::Tensor a = cpu_alias(t, host);
  c.tensors.push_back(Entry{t, a, st, host.get(), written});
  return a;
}

void note_tensor(const at::Tensor& t, Call& c, bool positional, bool written) {
  // a Python number passed where the schema takes a Tensor is a value, not an operand (as in Python dispatch)
  if (!c.record || t.unsafeGetTensorImpl()->is_wrapped_number()) return;
  c.all_tensors.push_back(t);
  if (positional) c.described.push_back(t);
  if (written) c.written_tensors.push_back(t);
}

void to_cpu(c10::IValue& v, Call& c, bool positional, bool written) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return;
    note_tensor(t, c, positional, written);
    if (t.device().type() == kNeuron) {
      v = alias_in_call(t, c, written);
    } else if (t.device().is_cpu()) {
      c.host_inputs.push_back(t.unsafeGetTensorImpl());
      if (t.dim() > 0) c.host_tensor = true;
    }
    return;
  }
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) {
      c10::IValue x(t);
      to_cpu(x, c, positional, written);
      out.push_back(x.toTensor());
    }
    v = std::move(out);
    return;
  }
  if (v.isList()) {  // Tensor?[] (index), Tensor[][] (allgather)
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue& e : list) {
      c10::IValue x(e);
      to_cpu(x, c, positional, written);
      out.push_back(std::move(x));
    }
    v = std::move(out);
    return;
  }
  if (v.isStorage()) {
    c10::Storage s = v.toStorage();
    if (s.device_type() == kNeuron) {
      auto host = host_of(s.unsafeGetStorageImpl());
      c.storages.emplace_back(host.get(), s);
      v = c10::Storage(host);
    }
    return;
  }
  if (v.isGenerator()) {
    v = cpu_generator_of(v.toGenerator());
    return;
  }
  if (c.info->c10d && v.isObject()) ensure_cpu_backend(v);
}

c10::Storage neuron_storage_for(c10::StorageImpl* host, const Call& c) {
  for (const auto& e : c.tensors)
    if (e.host == host) return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(e.storage));
  for (const auto& s : c.storages)
    if (s.first == host) return s.second;
  return c10::Storage();
}

at::Tensor neuron_tensor(c10::Storage storage, const at::Tensor& like) {
  at::Tensor n = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
  n.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) n._set_conj(true);
  if (like.is_neg()) n._set_neg(true);
  return n;
}

c10::Storage adopt(const at::Tensor& o, Call& c) {
  check_not_quantized(o.is_quantized());
  c10::StorageImpl* host = o.storage().unsafeGetStorageImpl();
  c10::Storage s = adopt_host_storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(host),
                                      static_cast<c10::DeviceIndex>(c.target), o.scalar_type(), o.sizes());
  c.storages.emplace_back(host, s);
  return s;
}

// Carry what an op did to an argument's CPU alias (new sizes, a re-allocated or swapped storage) to the neuron
// tensor.
void sync_back(Entry& e, Call& c) {
  c10::TensorImpl* ni = e.orig.unsafeGetTensorImpl();
  const at::Tensor& a = e.alias;
  c10::StorageImpl* now = a.storage().unsafeGetStorageImpl();
  if (now != e.host) {  // set_: the alias points at another storage now
    c10::Storage s = neuron_storage_for(now, c);
    if (!s) s = adopt(a, c);
    ni->set_storage_keep_dtype(std::move(s));
  } else if (e.host->_mutable_data_ptr_no_checks().get() != e.storage->_mutable_data_ptr_no_checks().get() ||
             e.host->sym_nbytes() != e.storage->sym_nbytes()) {
    follow_host(e.storage);  // re-allocated by a resize
  }
  if (a.sizes() != e.orig.sizes() || a.strides() != e.orig.strides() ||
      a.storage_offset() != e.orig.storage_offset()) {
    ni->set_sizes_and_strides(a.sizes(), a.strides(), a.storage_offset());
  }
}

at::Tensor to_neuron(const at::Tensor& o, Call& c) {
  if (!o.defined()) return o;
  c10::TensorImpl* oi = o.unsafeGetTensorImpl();
  for (auto& e : c.tensors) {
    if (e.alias.unsafeGetTensorImpl() == oi) {
      if (!e.written) sync_back(e, c);
      return e.orig;
    }
  }
  for (auto* h : c.host_inputs)
    if (h == oi) return o;
  if (o.device().is_cpu() && o.layout() != c10::Layout::Strided && !c.to_host) raise_layout(layout_name(o.layout()));
  if (!o.device().is_cpu() || !o.has_storage()) return o;
  c10::Storage s = neuron_storage_for(o.storage().unsafeGetStorageImpl(), c);
  if (!s) {
    if (c.to_host) return o;
    s = adopt(o, c);
  }
  return neuron_tensor(std::move(s), o);
}

void outputs_to_neuron(c10::IValue& v, Call& c, std::vector<at::Tensor>* outs) {
  if (v.isTensor()) {
    v = to_neuron(v.toTensor(), c);
    if (outs != nullptr && v.toTensor().defined()) outs->push_back(v.toTensor());
  } else if (v.isTensorList()) {
    auto list = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) {
      out.push_back(to_neuron(t, c));
      if (outs != nullptr && t.defined()) outs->push_back(out.get(out.size() - 1));
    }
    v = std::move(out);
  } else if (v.isList()) {
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& e : list) {
      c10::IValue x(e);
      outputs_to_neuron(x, c, outs);
      out.push_back(std::move(x));
    }
    v = std::move(out);
  } else if (v.isTuple()) {
    auto elems = v.toTupleRef().elements().vec();
    for (auto& x : elems) outputs_to_neuron(x, c, outs);
    v = c10::ivalue::Tuple::create(std::move(elems));
  }
}

void check_memory_format(const OpInfo& info, const c10::IValue& v) {
  if (!v.isInt()) return;
  auto mf = static_cast<c10::MemoryFormat>(v.toInt());
  if ((mf == c10::MemoryFormat::ChannelsLast || mf == c10::MemoryFormat::ChannelsLast3d) && g_memory_format_policy)
    g_memory_format_policy(info.name, mf);
}

// Tensors become meta tensors (shape, strides, dtype): what FLOP formulas and event hooks read.
c10::IValue meta_of(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return v;
    return at::empty_strided(t.sizes(), t.strides(), at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(meta_of(c10::IValue(t)).toTensor());
    return out;
  }
  if (v.isList()) {
    auto list = v.toList();
    if (list.size() > 0 && !(list.get(0).isTensor() || list.get(0).isList() || list.get(0).isNone())) return v;
    std::vector<c10::IValue> out;
    for (const c10::IValue& e : list) out.push_back(meta_of(e));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> out;
    for (const auto& e : v.toTupleRef().elements()) out.push_back(meta_of(e));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  return v;
}

bool has_bool_index(const std::vector<at::Tensor>& described) {
  for (size_t i = 1; i < described.size(); ++i)
    if (described[i].scalar_type() == at::kBool) return true;
  return false;
}

void record_call(Call& c, const std::vector<at::Tensor>& outs, int64_t t0, int64_t t1, c10::IValue&& args,
                 const torch::jit::Stack& results) {
  const OpInfo& info = *c.info;
  RecordedOp r;
  r.op = &info;
  r.t0 = t0;
  r.t1 = t1;
  r.device = static_cast<c10::DeviceIndex>(c.target);
  bool in_graph = current_graph() >= 0;
  if (info.local_scalar) {
    r.sync = kSyncItem;
    r.transfer = kD2H;
    r.transfer_bytes = c.described.empty() ? 0 : c.described[0].element_size();
  } else if (info.data_dependent || (info.bool_index && has_bool_index(c.all_tensors))) {
    r.sync = kSyncDataDependent;
  }
  if (info.copy_op && !in_graph) {
    auto on = [](const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; };
    bool src = true, dst = true;
    if (info.to_copy) {
      src = !c.all_tensors.empty() && on(c.all_tensors[0]);
      dst = !c.to_host;
    } else if (info.copy_from && c.all_tensors.size() >= 2) {
      src = on(c.all_tensors[0]);
      dst = on(c.all_tensors[1]);
    } else if (info.copy_inplace && c.all_tensors.size() >= 2) {
      src = on(c.all_tensors[1]);
      dst = on(c.all_tensors[0]);
    }
    if (src != dst) {
      r.transfer = dst ? kH2D : kD2H;
      const at::Tensor* t = outs.empty() ? nullptr : &outs[0];
      r.transfer_bytes = t != nullptr ? t->numel() * static_cast<int64_t>(t->element_size()) : 0;
      if (!dst) r.sync = kSyncToHost;
    }
  }
  for (const auto& t : c.all_tensors) r.reads.push_back(storage_id(t, false));
  for (const auto& t : c.written_tensors) r.writes.push_back(storage_id(t, false));
  for (size_t i = 0; i < outs.size(); ++i) {
    bool fresh = true;
    for (const auto& w : c.all_tensors)
      if (w.unsafeGetTensorImpl() == outs[i].unsafeGetTensorImpl()) fresh = false;
    if (fresh && outs.size() == info.nrets && !info.ret_fresh[i]) fresh = false;
    if (fresh && !info.is_view) r.writes.push_back(storage_id(outs[i], true));
  }
  if (at::globalContext().deterministicAlgorithms()) r.flags |= kFlagDeterministic;
  if (torch::autograd::get_current_graph_task_id() != -1) {
    // the forward op's autograd sequence number lets the profiler name its module and source line
    r.flags |= kFlagBackward;
    auto node = torch::autograd::get_current_node();
    if (node) r.fwd_seq = static_cast<int64_t>(node->sequence_nr());  // -1: AccumulateGrad (UINT64_MAX)
    // the profiler names the forward op's line; the line that called backward only for ops with no forward op
    r.user_line = r.fwd_seq < 0;
  } else if (c10::GradMode::is_enabled()) {
    // autograd numbered this op's backward node before dispatching here: the counter is one past it
    r.autograd_seq = static_cast<int64_t>(at::sequence_number::peek()) - 1;
  }
  r.inputs = std::move(c.described);
  r.outputs = outs;
  if (info.keep_args) {
    r.args = std::move(args);
    std::vector<c10::IValue> o;
    for (const auto& v : results) o.push_back(meta_of(v));
    r.outs = c10::ivalue::Tuple::create(std::move(o));
  }
  record(std::move(r));
}

}  // namespace

const OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  auto it = tl_ops.find(key);
  if (it != tl_ops.end()) return *it->second;
  std::lock_guard<std::mutex> g(g_ops_mutex);
  auto& slot = g_ops[key];
  if (!slot) slot = make_info(op.schema());
  tl_ops.emplace(key, slot.get());
  return *slot;
}

void set_keep_args_ops(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> g(g_ops_mutex);
  g_keep_args = names;
  for (auto& kv : g_ops) {
    auto& info = *kv.second;
    const std::string full = info.name + "." + info.overload;
    for (const auto& k : g_keep_args)
      if (k == info.name || k == full) info.keep_args = true;
  }
}

// The one boxed kernel: run the CPU kernel on CPU aliases of the arguments.
void neuron_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  backward_on_calling_thread();
  const OpInfo& info = op_info(op);
  Call c;
  c.info = &info;
  c.record = g_recording.load(std::memory_order_relaxed) && !quiet();
  const size_t n = info.nargs;
  const size_t first = stack->size() - n;
  c10::IValue kept;
  if (c.record && info.keep_args) {
    std::vector<c10::IValue> meta;
    for (size_t i = 0; i < n; ++i) meta.push_back(meta_of((*stack)[first + i]));
    kept = c10::ivalue::Tuple::create(std::move(meta));
  }
  if (info.memory_format_arg >= 0) check_memory_format(info, (*stack)[first + info.memory_format_arg]);
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[first + i];
    to_cpu(v, c, !info.kwarg_only[i], info.written[i]);
  }
  if (info.device_arg >= 0) {
    c10::IValue& d = (*stack)[first + info.device_arg];
    if (d.isDevice()) {
      c10::Device dev = d.toDevice();
      if (dev.type() == kNeuron) {
        c.target = check_index(dev.has_index() ? dev.index() : -1);
        d = c10::IValue(c10::Device(c10::DeviceType::CPU));
      } else {
        c.to_host = true;
      }
    }
  }
  if (c.host_tensor && c.device >= 0 && !info.copy_op && !info.index_op)
    raise_mixed("neuron:" + std::to_string(c.device), "cpu", &info);
  if (c.target < 0) c.target = c.device >= 0 ? c.device : current_device();

  int64_t t0 = c.record ? now_ns() : 0;
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  int64_t t1 = c.record ? now_ns() : 0;

  for (auto& e : c.tensors)
    if (e.written) sync_back(e, c);
  std::vector<at::Tensor> outs;
  const size_t nret = info.nrets;
  for (size_t i = stack->size() - nret; i < stack->size(); ++i)
    outputs_to_neuron((*stack)[i], c, c.record ? &outs : nullptr);
  if (c.record) {
    torch::jit::Stack results(stack->end() - static_cast<std::ptrdiff_t>(nret), stack->end());
    record_call(c, outs, t0, t1, std::move(kept), results);
  }
}

// -- the kernels that make tensors exist --------------------------------------------------------------------------
namespace {
struct DeviceScope {
  c10::DeviceIndex prev;
  explicit DeviceScope(c10::DeviceIndex index) : prev(current_device()) { set_current_device(index); }
  ~DeviceScope() { set_current_device(prev); }
};

c10::DeviceIndex index_of(std::optional<c10::Device> device) {
  return check_index(device.has_value() && device->has_index() ? device->index() : -1);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  backward_on_calling_thread();
  if (memory_format.has_value()) {
    auto mf = *memory_format;
    if ((mf == c10::MemoryFormat::ChannelsLast || mf == c10::MemoryFormat::ChannelsLast3d) && g_memory_format_policy)
      g_memory_format_policy("aten::empty", mf);
  }
  DeviceScope scope(index_of(device));
  auto dt = c10::dtype_or_default(dtype);
  check_not_quantized(c10::isQIntType(dt));
  describe_next_allocation(dt, size);
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  backward_on_calling_thread();
  DeviceScope scope(index_of(device));
  auto dt = c10::dtype_or_default(dtype);
  check_not_quantized(c10::isQIntType(dt));
  describe_next_allocation(dt, size);
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt);
}

at::Tensor host_view(const at::Tensor& t) {
  if (t.device().type() != kNeuron) return t;
  return cpu_alias(t, host_of(t.storage().unsafeGetStorageImpl()));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = host_view(dst);
  d.copy_(host_view(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

// SDPA: the kernel CPU would choose (its flash kernel, `_scaled_dot_product_flash_attention_for_cpu`, one op and
// one backward op, or the math decomposition), so results equal CPU's. TorchNeuron runs its NKI SDPA kernel here.
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  if (attn_mask.has_value() && attn_mask->defined() && c10::GradMode::is_enabled() && attn_mask->requires_grad())
    return static_cast<int64_t>(sdp::SDPBackend::math);
  // CPU's choice reads metadata only: ask it with meta tensors (also works while torch.compile traces)
  auto meta = [](const at::Tensor& t) {
    return at::empty_strided_symint(t.sym_sizes(), t.sym_strides(),
                                    at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
  };
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value() && attn_mask->defined()) mask = meta(*attn_mask);
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), meta(query), meta(key),
                                                meta(value), mask, dropout_p, is_causal, scale, enable_gqa);
}
}  // namespace

}  // namespace neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::fused_sdp_choice)
}  // namespace at::native

namespace neuron {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&raise_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&raise_sparse_compressed>());
}

// quantized factories and copies (quantize_per_tensor(...).to("neuron")) dispatch to this key
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&raise_quantized>());
}

// -- direct registrations (run once the studio registers the device; see the file's header) --------------------------
namespace {
std::vector<c10::RegistrationHandleRAII> g_registrations;

struct SilentWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};
}  // namespace

std::vector<std::string> register_direct_kernels(const std::vector<std::string>& exclude) {
  std::vector<std::string> done;
  if (!g_registrations.empty()) return done;
  auto& d = c10::Dispatcher::singleton();
  SilentWarnings silent;  // c10d has PrivateUse1 kernels of its own (they ask ProcessGroup for a neuron backend)
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  for (const auto& name : d.getAllOpNames()) {
    auto op = d.findOp(name);
    if (!op.has_value() || !op->hasSchema()) continue;
    std::string full = name.name + (name.overload_name.empty() ? ".default" : "." + name.overload_name);
    bool excluded = false;
    for (const auto& e : exclude)
      if (e == name.name || e == full) excluded = true;
    if (excluded) continue;
    using K = c10::DispatchKey;
    bool c10d = name.name.rfind("c10d::", 0) == 0;
    if (c10d) {
      if (!op->hasKernelForDispatchKey(K::CPU)) continue;
    } else {
      if (op->hasKernelForDispatchKey(K::PrivateUse1)) continue;
      bool composite_explicit = op->hasKernelForDispatchKey(K::CompositeExplicitAutograd) ||
                                op->hasKernelForDispatchKey(K::CompositeExplicitAutogradNonFunctional);
      bool cpu_over_decomposition =
          op->hasKernelForDispatchKey(K::CompositeImplicitAutograd) && op->hasKernelForDispatchKey(K::CPU);
      if (!composite_explicit && !cpu_over_decomposition) continue;
    }
    g_registrations.push_back(d.registerImpl(name, K::PrivateUse1,
                                             c10::KernelFunction::makeFromBoxedFunction<&neuron_kernel>(),
                                             std::nullopt, nullptr, "neuron_studio: run as on CPU"));
    done.push_back(full);
  }
  return done;
}

// -- op events for the recorder --------------------------------------------------------------------------------------
namespace {
std::mutex g_cpu_ids_mutex;
std::unordered_map<const c10::StorageImpl*, int64_t> g_cpu_ids;
std::atomic<int64_t> g_next_cpu_id{int64_t(1) << 40};
}  // namespace

int64_t storage_id(const at::Tensor& t, bool fresh) {
  if (!t.has_storage()) return 0;
  const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (HostBlock* b = block_of(s)) return b->id;
  std::lock_guard<std::mutex> g(g_cpu_ids_mutex);
  auto it = g_cpu_ids.find(s);
  if (it != g_cpu_ids.end() && !fresh) return it->second;
  int64_t id = ++g_next_cpu_id;
  g_cpu_ids[s] = id;
  return id;
}

}  // namespace neuron
