// caf_hb_shim: an LD_PRELOAD library that makes ThreadSanitizer usable on
// kvactor's tests although Debian's libcaf (0.17.6) is not built with it.
// It tells TSan the happens-before edges that CAF makes inside the
// uninstrumented library, which TSan cannot see: a message's enqueue
// before its dequeue, an actor's handlers one at a time (consecutive
// resumes), the actor companion's handler lock, a spawner's work before
// the actor's first resume, and every reference drop before the delete.
// Without it a facade run drowns in reports of message contents handed
// from thread to thread through CAF's mailboxes. It changes no behaviour
// and leaves kvactor's own mutexes and atomics alone, so those are still
// checked. The symbols are CAF 0.17.6's (mangled); another CAF needs them
// looked up again (nm -DC libcaf_core.so). Test tooling only: run.sh
// builds it and runs test binaries with it.
#include <atomic>
#include <cstddef>
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

template <class F> static F next(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) { std::fprintf(stderr, "shim: %s not found\n", name); std::abort(); }
  return reinterpret_cast<F>(p);
}

static char companion_w; // key: on_enqueue writer -> enqueue readers
static char companion_r; // key: enqueue readers -> on_enqueue writer

#define SHIM(ret, mangled, params, args, body)                               \
  extern "C" ret mangled params {                                            \
    using fn_t = ret(*) params;                                              \
    static fn_t orig = next<fn_t>(#mangled);                                 \
    body                                                                      \
  }

// void scheduled_actor::enqueue(mailbox_element_ptr, execution_unit*)
SHIM(void, _ZN3caf15scheduled_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE,
     (void* self, void** ptr, void* eu), (self, ptr, eu),
     { if (*ptr) __tsan_release(*ptr); __tsan_release(static_cast<char*>(self) + 1); orig(self, ptr, eu); })
// void blocking_actor::enqueue(mailbox_element_ptr, execution_unit*)
SHIM(void, _ZN3caf14blocking_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE,
     (void* self, void** ptr, void* eu), (self, ptr, eu),
     { if (*ptr) __tsan_release(*ptr); __tsan_release(static_cast<char*>(self) + 1); orig(self, ptr, eu); })
// task_result scheduled_actor::mailbox_visitor::operator()(mailbox_element&)
SHIM(int, _ZN3caf15scheduled_actor15mailbox_visitorclERNS_15mailbox_elementE,
     (void* vis, void* x), (vis, x),
     { void* self = *static_cast<void**>(vis); // mailbox_visitor::self
       __tsan_acquire(x); __tsan_acquire(self);
       int r = orig(vis, x); __tsan_release(self); return r; })
// bool scheduled_actor::activate(execution_unit*): each resume begins here
// (and the first runs make_behavior).
SHIM(bool, _ZN3caf15scheduled_actor8activateEPNS_14execution_unitE,
     (void* self, void* eu), (self, eu),
     { __tsan_acquire(self); bool r = orig(self, eu); __tsan_release(self); return r; })
SHIM(int, _ZN3caf14blocking_actor15mailbox_visitorclERNS_15mailbox_elementE,
     (void* vis, void* x), (vis, x),
     { __tsan_acquire(x); return orig(vis, x); })
// resume_result scheduled_actor::resume(execution_unit*, size_t)
SHIM(int, _ZN3caf15scheduled_actor6resumeEPNS_14execution_unitEm,
     (void* self, void* eu, std::size_t n), (self, eu, n),
     { __tsan_acquire(self); int r = orig(self, eu, n);
       if (r != 2 /* done */) __tsan_release(self); return r; })
// actor_companion: on_enqueue (writer lock) vs enqueue (reader lock)
SHIM(void, _ZN3caf15actor_companion10on_enqueueESt8functionIFvSt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEEE,
     (void* self, void* f), (self, f),
     { __tsan_acquire(&companion_r); orig(self, f); __tsan_release(&companion_w); })
SHIM(void, _ZN3caf15actor_companion7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE,
     (void* self, void** ptr, void* eu), (self, ptr, eu),
     { __tsan_acquire(&companion_w); orig(self, ptr, eu); __tsan_release(&companion_r); })
// refcounts: every drop releases; the drop that destroys acquires first.
SHIM(void, _ZN3caf21intrusive_ptr_releaseEPNS_19actor_control_blockE,
     (void* x), (x),
     { __tsan_release(x);
       if (static_cast<std::atomic<std::size_t>*>(x)->load() == 1) __tsan_acquire(x);
       orig(x); })
SHIM(void, _ZN3caf26intrusive_ptr_release_weakEPNS_19actor_control_blockE,
     (void* x), (x),
     { __tsan_release(x);
       if ((static_cast<std::atomic<std::size_t>*>(x) + 1)->load() == 1) __tsan_acquire(x);
       orig(x); })
SHIM(void, _ZNK3caf11ref_counted5derefEv,
     (const void* self), (self),
     { void* p = const_cast<void*>(self);
       __tsan_release(p);
       auto* rc = reinterpret_cast<std::atomic<std::size_t>*>(static_cast<char*>(p) + sizeof(void*));
       if (rc->load() == 1) __tsan_acquire(p);
       orig(self); })
// void scheduled_actor::launch(execution_unit*, bool lazy, bool hide):
// what the spawner did before is visible to the actor's first resume.
SHIM(void, _ZN3caf15scheduled_actor6launchEPNS_14execution_unitEbb,
     (void* self, void* eu, bool lazy, bool hide), (self, eu, lazy, hide),
     { __tsan_release(self); orig(self, eu, lazy, hide); })

// Elements still queued when an actor finishes are destroyed in cleanup,
// without a visitor: they come from every enqueue so far (key self+1).
SHIM(bool, _ZN3caf15scheduled_actor8finalizeEv, (void* self), (self),
     { __tsan_acquire(static_cast<char*>(self) + 1); __tsan_acquire(self); return orig(self); })
SHIM(void, _ZN3caf15scheduled_actor7cleanupEONS_5errorEPNS_14execution_unitE,
     (void* self, void* err, void* eu), (self, err, eu),
     { __tsan_acquire(static_cast<char*>(self) + 1); __tsan_acquire(self); orig(self, err, eu); })
