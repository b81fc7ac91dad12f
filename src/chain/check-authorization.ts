// What only the chain knows about an EIP-3009 authorization: its nonce is unused and the payer holds the
// funds. Read in one batched round trip; expected failures are values.
//
// The balance read answers with the block it reflects, for the claim's reservation (src/books/claims.ts):
// the claim subtracts what the payer's other authorizations still hold, counting those settled after that
// block too, so a read reused for a few seconds (balanceTtlMs) is as exact there as a fresh one: a payer's
// second and later authorizations in that window cost one eth_call (the nonce) instead of three.
//
// The nonce read is never skipped: a nonce used elsewhere on chain (the payer's own transfer, another
// facilitator) would make our settlement revert and the call stay served unpaid, and nothing in our books
// could bound that; it costs one eth_call in a batch the request waits for anyway.
//
// The checks of one payer that join a balance read in flight never accept past it together (a burst of
// concurrent authorizations worth more than the wallet is cut here, before the database); the claim is
// still the bound that holds across calls and instances.
import { LRUCache } from 'lru-cache'
import type { Address, Hex } from 'viem'
import type { TokenReads } from './token-reads.ts'

/** A payer's balance and the block it is known to reflect (the transfers mined up to it are in it). */
export interface BalanceRead {
  atomic: bigint
  block: bigint
}

export type AuthorizationChainCheck =
  | { ok: true; balance: BalanceRead }
  | { ok: false; reason: 'proof_already_used' | 'insufficient_funds' | 'rpc_unavailable' }

export interface AuthorizationChainChecker {
  (q: { from: Address; nonce: Hex; value: bigint }): Promise<AuthorizationChainCheck>
  /** Drops the payer's reused read (a claim was refused for funds: the next one reads again, a top-up shows). */
  forget(from: Address): void
}

/** One payer's balance read in flight and what the checks that joined it have accepted against it. */
interface SharedBalance {
  balance: Promise<BalanceRead>
  accepted: bigint
}

/** Payers whose balance read is kept; past it the least recently used is read again. */
const CACHED_PAYERS_MAX = 10_000

export function createAuthorizationChainChecker(
  reads: Pick<TokenReads, 'authorizationUsed' | 'spendable' | 'blockNumber'>,
  options: { balanceTtlMs?: number } = {},
): AuthorizationChainChecker {
  const ttl = options.balanceTtlMs ?? 0
  const cached =
    ttl > 0 ? new LRUCache<string, BalanceRead>({ max: CACHED_PAYERS_MAX, ttl, ttlAutopurge: false }) : null
  const shared = new Map<string, SharedBalance>()
  const readBalance = async (from: Address): Promise<BalanceRead> => {
    // Queued in this order in one JSON-RPC batch: the head first, then the balance. A node answers a batch
    // within milliseconds, so the balance reflects at least the block before that head (one block of
    // margin in case it evaluates the calls out of order): a settlement mined after it is counted by the
    // claim, one mined at or before it is in the balance.
    // What it can spend: 0 for an account the token blacklists (USDC's), whose settlement would revert.
    const [head, atomic] = await Promise.all([reads.blockNumber(), reads.spendable(from)])
    return { atomic, block: head > 0n ? head - 1n : 0n }
  }
  const join = (key: string, from: Address): SharedBalance => {
    const joined = shared.get(key)
    if (joined) return joined
    const read: SharedBalance = { balance: readBalance(from), accepted: 0n }
    shared.set(key, read)
    // Registered before any check awaits it, so it runs first: a check that arrives once the balance is in
    // uses the kept read (or starts a fresh one), while those that joined this one still count against it.
    const leave = () => {
      if (shared.get(key) === read) shared.delete(key)
    }
    read.balance.then((b) => {
      leave()
      cached?.set(key, b)
    }, leave)
    return read
  }
  const check = async (q: { from: Address; nonce: Hex; value: bigint }): Promise<AuthorizationChainCheck> => {
    const key = q.from.toLowerCase()
    const kept = shared.has(key) ? undefined : cached?.get(key)
    const read = kept === undefined ? join(key, q.from) : null
    try {
      const [used, balance] = await Promise.all([
        reads.authorizationUsed(q.from, q.nonce),
        read === null ? kept! : read.balance,
      ])
      if (used) return { ok: false, reason: 'proof_already_used' }
      // Checks resume one at a time, in the order they joined: each sees what the earlier ones accepted.
      const accepted = read === null ? 0n : read.accepted
      if (balance.atomic - accepted < q.value) {
        cached?.delete(key)
        return { ok: false, reason: 'insufficient_funds' }
      }
      if (read !== null) read.accepted += q.value
      return { ok: true, balance }
    } catch {
      return { ok: false, reason: 'rpc_unavailable' }
    }
  }
  return Object.assign(check, { forget: (from: Address) => void cached?.delete(from.toLowerCase()) })
}
