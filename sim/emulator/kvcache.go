package emulator

import (
	"slices"
	"sync/atomic"
)

// kvCache is vLLM's block pool: fixed-size blocks, a reference count per
// block, a free queue in LRU order (head evicted first) that also holds
// cached blocks nobody references, and a map from chained block hash to
// the block that holds it. It is owned by the engine goroutine.
//
// Blocks come into being on first use: the free queue starts as every
// block in index order, so the blocks never used yet are always at its
// head, ahead of any freed one, and are handed out first in index order.
// Only those used so far are stored (blocks), so an engine with hundreds of
// thousands of blocks costs nothing to start (the virtual-time predictor
// starts one per worker and level).
type kvCache struct {
	blockSize int
	prefix    bool // prefix caching on
	total     int  // capacity in blocks
	blocks    []kvBlock
	head      int // free queue; -1 when empty
	tail      int
	numFree   int
	cached    map[uint64]int32
	evictions atomic.Int64 // read by /metrics
	// memo keeps each chain's last match by its first block's hash: a
	// request of a known prefix is matched by checking that each block
	// still holds its hash (an array read) instead of a map lookup per
	// block. A block holds hash h (hashed, hash == h) exactly when
	// cached[h] names it, so the result is the same.
	memo map[uint64]*matchMemo
}

type matchMemo struct {
	hashes []uint64
	ids    []int32
}

// maxMemo bounds the match memo; past it, it starts over.
const maxMemo = 4096

type kvBlock struct {
	ref        int32
	prev, next int32 // free-queue links; -2 when not queued
	hash       uint64
	hashed     bool
}

const notQueued = -2

func newKVCache(numBlocks, blockSize int, prefix bool) *kvCache {
	return &kvCache{blockSize: blockSize, prefix: prefix, total: numBlocks, numFree: numBlocks,
		head: -1, tail: -1, cached: make(map[uint64]int32, min(numBlocks, 1<<12))}
}

// numBlocks is the capacity in blocks.
func (c *kvCache) numBlocks() int { return c.total }

func (c *kvCache) pushTail(id int32) {
	b := &c.blocks[id]
	b.prev, b.next = int32(c.tail), -1
	if c.tail >= 0 {
		c.blocks[c.tail].next = id
	} else {
		c.head = int(id)
	}
	c.tail = int(id)
}

func (c *kvCache) unlink(id int32) {
	b := &c.blocks[id]
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = int(b.next)
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = int(b.prev)
	}
	b.prev, b.next = notQueued, notQueued
}

// match returns the blocks holding the longest run of hashes, at most
// maxBlocks of them. With prefix caching off it matches nothing.
func (c *kvCache) match(hashes []uint64, maxBlocks int) []int32 {
	if !c.prefix {
		return nil
	}
	n := min(len(hashes), maxBlocks)
	if n <= 0 {
		return nil
	}
	m := c.memo[hashes[0]]
	var out []int32
	for i := range n {
		h := hashes[i]
		if m != nil && i < len(m.ids) && m.hashes[i] == h {
			if b := &c.blocks[m.ids[i]]; b.hashed && b.hash == h {
				out = append(out, m.ids[i])
				continue
			}
		}
		id, ok := c.cached[h]
		if !ok {
			break
		}
		out = append(out, id)
	}
	if len(out) > 0 && (m == nil || len(out) != len(m.ids) || !slices.Equal(out, m.ids)) {
		if c.memo == nil || len(c.memo) >= maxMemo {
			c.memo = map[uint64]*matchMemo{}
		}
		c.memo[hashes[0]] = &matchMemo{hashes: slices.Clone(hashes[:len(out)]), ids: slices.Clone(out)}
	}
	return out
}

// canAllocate reports whether hit blocks can be taken and n new ones
// allocated together.
func (c *kvCache) canAllocate(hit []int32, n int) bool {
	need := n
	for _, id := range hit {
		if c.blocks[id].ref == 0 {
			need++
		}
	}
	return need <= c.numFree
}

// touch takes a reference on each hit block, pulling it out of the free
// queue if nobody held it.
func (c *kvCache) touch(ids []int32) {
	for _, id := range ids {
		b := &c.blocks[id]
		if b.ref == 0 {
			c.unlink(id)
			c.numFree--
		}
		b.ref++
	}
}

// allocate takes n blocks from the head of the free queue, evicting their
// cached contents; the caller has checked canAllocate.
func (c *kvCache) allocate(n int) []int32 {
	out := make([]int32, n)
	c.numFree -= n
	for i := range out {
		if len(c.blocks) < c.total { // never used: at the queue's head
			out[i] = int32(len(c.blocks))
			c.blocks = append(c.blocks, kvBlock{ref: 1, prev: notQueued, next: notQueued})
			continue
		}
		id := int32(c.head)
		c.unlink(id)
		b := &c.blocks[id]
		if b.hashed {
			if c.cached[b.hash] == id {
				delete(c.cached, b.hash)
			}
			b.hashed = false
			c.evictions.Add(1)
		}
		b.ref = 1
		out[i] = id
	}
	return out
}

// free drops one reference on each block, last block first, so a
// sequence's tail is evicted before its shared prefix.
func (c *kvCache) free(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		b := &c.blocks[ids[i]]
		b.ref--
		if b.ref == 0 {
			c.pushTail(ids[i])
			c.numFree++
		}
	}
}

// commit records that block id now holds the full block named hash, so
// later requests can reuse it.
func (c *kvCache) commit(id int32, hash uint64) {
	if !c.prefix {
		return
	}
	b := &c.blocks[id]
	if b.hashed {
		return
	}
	if _, dup := c.cached[hash]; dup {
		return
	}
	b.hash, b.hashed = hash, true
	c.cached[hash] = id
}

// reset forgets every cached block that nobody references (vLLM's
// /reset_prefix_cache).
func (c *kvCache) reset() {
	for h, id := range c.cached {
		if c.blocks[id].ref == 0 {
			c.blocks[id].hashed = false
			delete(c.cached, h)
		}
	}
}

// usage is the fraction of blocks in use (vLLM's kv_cache_usage_perc).
func (c *kvCache) usage() float64 {
	if c.total == 0 {
		return 0
	}
	return 1 - float64(c.numFree)/float64(c.total)
}
