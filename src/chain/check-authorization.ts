// What only the chain knows about an EIP-3009 authorization: its nonce is unused and the payer holds the
// funds. Read in one batched round trip; expected failures are values.
//
// The checks of one payer share the balance read in flight, and what they accept against it together never
// exceeds it. A burst of concurrent authorizations whose sum is more than the wallet holds is served up to
// what it holds; checked one by one against the same balance, every one of them would pass, and the
// settlements past the balance would revert unpaid. It also saves the node one eth_call per joined check.
import type { Address, Client, Hex } from 'viem'
import { readContract } from 'viem/actions'
import { readAuthorizationState } from './authorization.ts'
import { usdcAbi } from './usdc.ts'

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

export function createAuthorizationChainChecker(client: Client, usdc: Address): AuthorizationChainChecker {
  const reads = new Map<string, SharedBalance>()
  const join = (from: Address): SharedBalance => {
    const key = from.toLowerCase()
    const joined = reads.get(key)
    if (joined) return joined
    const shared: SharedBalance = {
      balance: readContract(client, { address: usdc, abi: usdcAbi, functionName: 'balanceOf', args: [from] }),
      accepted: 0n,
    }
    reads.set(key, shared)
    // Registered before any check awaits it, so it runs first: a check that arrives once the balance is in
    // starts a fresh read, while those that joined this one still count against it.
    const leave = () => {
      if (reads.get(key) === shared) reads.delete(key)
    }
    shared.balance.then(leave, leave)
    return shared
  }
  return async (q) => {
    const shared = join(q.from)
    try {
      const [used, balance] = await Promise.all([
        readAuthorizationState(client, { usdc, authorizer: q.from, nonce: q.nonce }),
        shared.balance,
      ])
      if (used) return { ok: false, reason: 'proof_already_used' }
      // Checks resume one at a time, in the order they joined: each sees what the earlier ones accepted.
      if (balance - shared.accepted < q.value) return { ok: false, reason: 'insufficient_funds' }
      shared.accepted += q.value
      return { ok: true }
    } catch {
      return { ok: false, reason: 'rpc_unavailable' }
    }
  }
}
