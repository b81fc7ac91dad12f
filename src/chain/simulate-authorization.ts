// A dry run of the settlement (eth_call of transferWithAuthorization from the treasury) before a costly call
// is served: it catches what the separate nonce and balance reads cannot (a token that would refuse the
// transfer for its own reasons, a smart wallet that answers differently on chain).
import {
  type Address,
  BaseError,
  type Client,
  ContractFunctionRevertedError,
  type Hex,
  isErc6492Signature,
  parseErc6492Signature,
} from 'viem'
import { simulateContract } from 'viem/actions'
import type { TransferAuthorization } from './authorization.ts'
import { usdcAbi } from './usdc.ts'

export type SimulationCheck =
  | { ok: true }
  | { ok: false; reason: 'simulation_failed'; detail?: string }
  | { ok: false; reason: 'rpc_unavailable' }

export async function simulateTransferAuthorization(
  client: Client,
  p: { usdc: Address; treasury: Address; authorization: TransferAuthorization; signature: Hex },
): Promise<SimulationCheck> {
  const a = p.authorization
  // A deployed wallet is asked with its inner signature, as settlement will (verify-smart-wallet.ts).
  const signature = isErc6492Signature(p.signature)
    ? parseErc6492Signature(p.signature).signature
    : p.signature
  try {
    await simulateContract(client, {
      account: p.treasury,
      address: p.usdc,
      abi: usdcAbi,
      // The bytes overload takes EOA and contract-wallet signatures alike (FiatTokenV2_2, TestUSDC).
      functionName: 'transferWithAuthorization',
      args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature],
    })
    return { ok: true }
  } catch (err) {
    const reverted =
      err instanceof BaseError ? err.walk((e) => e instanceof ContractFunctionRevertedError) : null
    if (reverted instanceof ContractFunctionRevertedError)
      return { ok: false, reason: 'simulation_failed', detail: reverted.reason ?? reverted.shortMessage }
    return { ok: false, reason: 'rpc_unavailable' }
  }
}
