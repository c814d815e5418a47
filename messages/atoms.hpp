// The atoms of kvactor's protocol (at most 10 characters each, CAF 0.17).
#pragma once

#include <caf/atom.hpp>

namespace kvactor {

using allocate_atom = caf::atom_constant<caf::atom("allocate")>;
using extend_atom = caf::atom_constant<caf::atom("extend")>;
using append_atom = caf::atom_constant<caf::atom("append")>;
using free_atom = caf::atom_constant<caf::atom("free")>;
using fork_atom = caf::atom_constant<caf::atom("fork")>;
using can_alloc_atom = caf::atom_constant<caf::atom("canalloc")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using gc_atom = caf::atom_constant<caf::atom("gc")>;
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using table_atom = caf::atom_constant<caf::atom("table")>;
using info_atom = caf::atom_constant<caf::atom("info")>;
using end_atom = caf::atom_constant<caf::atom("end")>;
using ended_atom = caf::atom_constant<caf::atom("ended")>;
using reclaim_atom = caf::atom_constant<caf::atom("reclaim")>;
using unclaimed_atom = caf::atom_constant<caf::atom("unclaimed")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
using unsubscribe_atom = caf::atom_constant<caf::atom("unsub")>;
using pressure_atom = caf::atom_constant<caf::atom("pressure")>;
using usage_atom = caf::atom_constant<caf::atom("usage")>;
using evict_atom = caf::atom_constant<caf::atom("evict")>;
using check_atom = caf::atom_constant<caf::atom("check")>;
using preempt_atom = caf::atom_constant<caf::atom("preempt")>;
using copy_atom = caf::atom_constant<caf::atom("copy")>;
using swap_out_atom = caf::atom_constant<caf::atom("swapout")>;
using swap_in_atom = caf::atom_constant<caf::atom("swapin")>;
using write_atom = caf::atom_constant<caf::atom("write")>;
using gather_atom = caf::atom_constant<caf::atom("gather")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using kv_event_atom = caf::atom_constant<caf::atom("kvevent")>;
using pin_atom = caf::atom_constant<caf::atom("pin")>;
using unpin_atom = caf::atom_constant<caf::atom("unpin")>;
using victims_atom = caf::atom_constant<caf::atom("victims")>;
using index_atom = caf::atom_constant<caf::atom("index")>;
using registry_atom = caf::atom_constant<caf::atom("registry")>;
using draft_atom = caf::atom_constant<caf::atom("draft")>;
using settle_atom = caf::atom_constant<caf::atom("settle")>;
using discard_atom = caf::atom_constant<caf::atom("discard")>;
using probe_atom = caf::atom_constant<caf::atom("probe")>;

} // namespace kvactor
