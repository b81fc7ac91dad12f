// The hot path's lru-caches: endpoints by id, verified transfers by hash, recently used proofs.
import { LRUCache } from 'lru-cache'
import { cacheLookups } from '../observability/metrics.ts'

/** What the chain proved about a transaction-hash proof: the USDC it moved to the treasury. */
export interface VerifiedTransfer {
  hash: `0x${string}`
  from: `0x${string}`
  value: bigint
  blockNumber: bigint
  timestampMs: number
}

export interface CacheSizes {
  endpoints_max: number
  verified_transfers_max: number
  claimed_proofs_max: number
}

export const cacheCounters = {
  endpointHit: cacheLookups.labels('endpoints', 'hit'),
  endpointMiss: cacheLookups.labels('endpoints', 'miss'),
  transferHit: cacheLookups.labels('verified_transfers', 'hit'),
  transferMiss: cacheLookups.labels('verified_transfers', 'miss'),
  usedHit: cacheLookups.labels('used_proofs', 'hit'),
}

export function createVerifiedTransferCache(sizes: CacheSizes) {
  return new LRUCache<string, VerifiedTransfer>({ max: sizes.verified_transfers_max })
}

/** Proofs known to be spent (captured or claimed elsewhere): a replay is refused without a query. */
export function createUsedProofCache(sizes: CacheSizes) {
  return new LRUCache<string, true>({ max: sizes.claimed_proofs_max })
}
