// What only the chain knows about an EIP-3009 authorization: its nonce is unused and the payer holds the
// funds. Read in one batched round trip; expected failures are values.
//
// The checks of one payer share the balance read in flight, and what they accept against it together never
// exceeds it. A burst of concurrent authorizations whose sum is more than the wallet holds is served up to
// what it holds; checked one by one against the same balance, every one of them would pass, and the
// settlements past the balance would revert unpaid. It also saves the node one eth_call per joined check.
import type { Address, Hex } from 'viem'
import type { TokenReads } from './token-reads.ts'

export type AuthorizationChainCheck =
  | { ok: true }
  | { ok: false; reason: 'proof_already_used' | 'insufficient_funds' | 'rpc_unavailable' }

export type AuthorizationChainChecker = (q: {
  from: Address
  nonce: Hex
  value: bigint
}) => Promise<AuthorizationChainCheck>

/** One payer's balance read in flight and what the checks that joined it have accepted against it. */
interface SharedBalance {
  balance: Promise<bigint>
  accepted: bigint
}

export function createAuthorizationChainChecker(
  reads: Pick<TokenReads, 'authorizationUsed' | 'balanceOf'>,
): AuthorizationChainChecker {
  const shared = new Map<string, SharedBalance>()
  const join = (from: Address): SharedBalance => {
    const key = from.toLowerCase()
    const joined = shared.get(key)
    if (joined) return joined
    const read: SharedBalance = { balance: reads.balanceOf(from), accepted: 0n }
    shared.set(key, read)
    // Registered before any check awaits it, so it runs first: a check that arrives once the balance is in
    // starts a fresh read, while those that joined this one still count against it.
    const leave = () => {
      if (shared.get(key) === read) shared.delete(key)
    }
    read.balance.then(leave, leave)
    return read
  }
  return async (q) => {
    const read = join(q.from)
    try {
      const [used, balance] = await Promise.all([reads.authorizationUsed(q.from, q.nonce), read.balance])
      if (used) return { ok: false, reason: 'proof_already_used' }
      // Checks resume one at a time, in the order they joined: each sees what the earlier ones accepted.
      if (balance - read.accepted < q.value) return { ok: false, reason: 'insufficient_funds' }
      read.accepted += q.value
      return { ok: true }
    } catch {
      return { ok: false, reason: 'rpc_unavailable' }
    }
  }
}
