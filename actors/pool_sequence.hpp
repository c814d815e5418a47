// sequence: one live request as the block pool sees it - its block table,
// token count, hashing state for the prefix index, and where its blocks are
// (on the device, on the host tier, or moving). block_pool_core keeps one per
// request; tests and the invariant check read them. CAF-free.
#pragma once

#include <cstdint>
#include <vector>

#include "kvactor/actors/block_hash.hpp"
#include "kvactor/actors/small_vector.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// Where a request's blocks are. Transitions: resident -> swapping_out ->
/// swapped -> swapping_in -> resident; the *_ing states last while the
/// device moves the bytes, and a failed move returns to the previous state.
enum class residency : std::uint8_t { resident, swapping_out, swapped, swapping_in };

/// Block tables of up to this many blocks live inside the sequence.
constexpr std::uint32_t inline_blocks = 14;

/// A sequence's block table: inline up to inline_blocks, then on the heap.
using sequence_blocks = small_vector<block_id, inline_blocks>;

/// One live request as the pool sees it. Laid out for the lookup every
/// operation makes among up to hundreds of thousands of them: what an
/// extend reads and writes - a short block table included - fills its
/// first two cache lines (find() fetches both at once), and each sequence
/// starts on a line of its own.
struct alignas(64) sequence {
  sequence()
    : tail_shared(false), cow_pending(false), hashable(false),
      release_pending(false), restarted(false), acquired(false) {
  }

  // -- first two cache lines -------------------------------------------------
  request_id id = 0;
  std::uint64_t cache_id = 0; ///< unique over the pool's lifetime
  std::uint64_t num_tokens = 0;
  std::uint64_t max_tokens = 0;
  /// When it was admitted or last grew (the core's clock then: ns since
  /// the Unix epoch, set by the pool actor; 0 if never set). Its handle's
  /// stats report it, whichever path - handle, manager or step - grew it.
  std::uint64_t last_access = 0;
  std::uint16_t tenant = 0;
  kvactor::priority priority = kvactor::priority::normal;
  // Swapping: where its blocks are (see host_blocks below).
  residency where = residency::resident;
  /// LRU level its blocks join when released (retention_of).
  std::uint8_t level = 5;
  // Flags, one byte for all six.
  /// Its partially filled last block may be shared: set by fork (which
  /// gives a partial block a second holder) and by a failed copy-on-write
  /// copy (which gives it back); checked before appending, which copies
  /// the block first unless only copies in flight still read it.
  bool tail_shared : 1;
  /// Its copy-on-write copy is under way (extend with hold_copies): the
  /// blocks it fills meanwhile enter the prefix index only once the copy
  /// is made (settle_copies), as their contents build on it.
  bool cow_pending : 1;
  // Hashing state: the first `num_hashed` blocks are full and hashed, `chain`
  // is the last one's hash (the namespace seed if none) and `tail` holds the
  // tokens after them (fewer than a block, plus any drafts). Lost
  // (hashable = false) once tokens arrive unnamed.
  bool hashable : 1;
  // A release during a move (swapping_out, swapping_in) ends the request at
  // once but leaves it a ghost (release_pending: out of the id index, its
  // id free for a new incarnation) until the move's end returns its blocks.
  bool release_pending : 1;
  /// It has come back on the device (a swap-in) since its admission:
  /// its writes' epoch has a token of its own (write_lineage.hpp).
  bool restarted : 1;
  /// Its acc (write_lineage) may hold a token: it holds blocks computed
  /// over another live request's writes.
  bool acquired : 1;
  /// Where the blocks it brought begin (at most 65535): its admission's
  /// hits before (a fork's: its parent's full blocks at the fork). Those from
  /// here on it indexed itself - at its admission, or as it grew - and an
  /// end that cannot know its K/V were written takes them out of the
  /// prefix index even while others hold them (discard).
  std::uint16_t brought_from = 0;
  sequence_blocks blocks; ///< 64 bytes: bytes 48 to 112
  // -- the rest ----------------------------------------------------------------
  /// Tokens it is expected to reach (admission headroom); 0 = no promise.
  std::uint64_t expected_tokens = 0;
  std::uint64_t admitted = 0; ///< admission order (larger = newer)
  /// The last step whose extends named it (run_step extends a request at
  /// most once per step).
  std::uint64_t step_stamp = 0;
  std::uint32_t num_hashed = 0;
  /// Its first blocks whose K/V were written before it came (at most
  /// 65535): those its admission found cached, up to the first hit on a
  /// block in use - which another request's admission may just have
  /// indexed, unwritten - as an earlier request's pass wrote them (a
  /// fork's: its parent's). An end that cannot know its own K/V were
  /// written (an unindexing preemption, a reclaim) leaves them in the
  /// index.
  std::uint16_t hit_blocks = 0;
  /// Draft tokens (speculative decoding): the last `drafts` of num_tokens
  /// hold slots but are not settled - no block holding one is indexed, and
  /// with named tokens their ids wait at the end of `tail`, unhashed, until
  /// settle_drafts keeps or drops them. At most max_draft_tokens.
  std::uint16_t drafts = 0;
  block_hash chain;
  std::vector<token_id> tail;
  // -- cold: swapping ----------------------------------------------------------
  // Host-tier copies (swapping_out, swapped) and the device blocks being
  // filled (swapping_in).
  std::vector<block_id> host_blocks;
  // Per host block: its hash if the block was in the prefix index when it
  // left, else zero. A swap-in shares such a block again, without a copy,
  // if the prefix is still on the device.
  std::vector<block_hash> host_hashes;
  std::vector<block_id> incoming;
};

static_assert(sizeof(sequence_blocks) == 64, "a block table is one line long");
static_assert(sizeof(sequence) == 256, "a sequence is four lines long");

} // namespace kvactor::detail
