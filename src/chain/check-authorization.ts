// What only the chain knows about an EIP-3009 authorization: its nonce is unused and the payer holds the
// funds. Read in one batched round trip; expected failures are values.
import type { Address, Client, Hex } from 'viem'
import { readContract } from 'viem/actions'
import { readAuthorizationState } from './authorization.ts'
import { usdcAbi } from './usdc.ts'

export type AuthorizationChainCheck =
  | { ok: true }
  | { ok: false; reason: 'proof_already_used' | 'insufficient_funds' | 'rpc_unavailable' }

export async function checkAuthorizationOnChain(
  client: Client,
  q: { usdc: Address; from: Address; nonce: Hex; value: bigint },
): Promise<AuthorizationChainCheck> {
  try {
    const [used, balance] = await Promise.all([
      readAuthorizationState(client, { usdc: q.usdc, authorizer: q.from, nonce: q.nonce }),
      readContract(client, { address: q.usdc, abi: usdcAbi, functionName: 'balanceOf', args: [q.from] }),
    ])
    if (used) return { ok: false, reason: 'proof_already_used' }
    if ((balance as bigint) < q.value) return { ok: false, reason: 'insufficient_funds' }
    return { ok: true }
  } catch {
    return { ok: false, reason: 'rpc_unavailable' }
  }
}
