// A contract call signed locally (EIP-1559, no value): its hash is known, and recorded, before anything is
// broadcast, so a restart looks the transaction up instead of sending blind. Every treasury and settler send
// (settlements, payouts, channel claims) is signed here.
import type { Address, Hash, Hex, PrivateKeyAccount } from 'viem'
import { keccakHex } from './keccak.ts'

/** The fee caps of one send (./payouts.ts quoteFees). */
interface Fees {
  maxFeePerGas: bigint
  maxPriorityFeePerGas: bigint
}

export interface SignedCall {
  rawTx: Hex
  hash: Hash
}

export async function signCall(
  account: PrivateKeyAccount,
  p: { chainId: number; to: Address; data: Hex; nonce: number; gas: bigint; fees: Fees },
): Promise<SignedCall> {
  const rawTx = await account.signTransaction({
    type: 'eip1559',
    chainId: p.chainId,
    to: p.to,
    data: p.data,
    nonce: p.nonce,
    gas: p.gas,
    maxFeePerGas: p.fees.maxFeePerGas,
    maxPriorityFeePerGas: p.fees.maxPriorityFeePerGas,
    value: 0n,
  })
  return { rawTx, hash: keccakHex(rawTx) }
}
