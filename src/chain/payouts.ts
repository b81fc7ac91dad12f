// Chain I/O of payouts, no SQL: treasury funds, fee quotes, signing a USDC transfer for a fixed nonce,
// broadcasting it, and finding out later what became of that nonce.
import {
  type Address,
  encodeFunctionData,
  type Hash,
  type Hex,
  type PrivateKeyAccount,
  zeroAddress,
} from 'viem'
import type { ChainPublicClient } from './client.ts'
import { nullIfNotFound } from './not-found.ts'
import { signCall } from './sign-call.ts'
import { usdcAbi } from './usdc.ts'

/** Used when the node cannot estimate (e.g. the treasury holds no USDC yet); a USDC transfer needs ~40–60k. */
export const FALLBACK_TRANSFER_GAS = 120_000n

export interface TreasuryFunds {
  usdcAtomic: bigint
  wei: bigint
}

export async function readTreasuryFunds(
  client: ChainPublicClient,
  { treasury, usdc }: { treasury: Address; usdc: Address },
): Promise<TreasuryFunds> {
  const [usdcAtomic, wei] = await Promise.all([
    client.readContract({ address: usdc, abi: usdcAbi, functionName: 'balanceOf', args: [treasury] }),
    client.getBalance({ address: treasury }),
  ])
  return { usdcAtomic, wei }
}

export interface FeeQuote {
  maxFeePerGas: bigint
  maxPriorityFeePerGas: bigint
}

/**
 * The fee cap's headroom over the latest base fee. viem's default (1.2×) is outrun by two full blocks in a
 * row (+12.5% each), and a transaction whose cap falls under the base fee is dropped (anvil, checked) or
 * parked (geth) while every later nonce of its sender waits behind it: under load that stalled a settler for
 * good. 2× (what geth's and ethers' wallets quote) lasts six full blocks; only base fee + tip is ever paid.
 */
const BASE_FEE_HEADROOM = 2n

export async function quoteFees(client: ChainPublicClient): Promise<FeeQuote> {
  const [block, tip] = await Promise.all([
    client.getBlock({ blockTag: 'latest' }),
    client.estimateMaxPriorityFeePerGas(),
  ])
  return { maxFeePerGas: (block.baseFeePerGas ?? 0n) * BASE_FEE_HEADROOM + tip, maxPriorityFeePerGas: tip }
}

/**
 * Gas limit for one payout transfer: estimated for a transfer to a never-seen address (the dearest case,
 * a new balance slot), plus a 30% margin. Amount 1 base unit, so it only needs the treasury to hold some USDC.
 */
export async function estimateTransferGas(
  client: ChainPublicClient,
  { treasury, usdc }: { treasury: Address; usdc: Address },
): Promise<bigint> {
  try {
    const gas = await client.estimateGas({
      account: treasury,
      to: usdc,
      data: encodeFunctionData({
        abi: usdcAbi,
        functionName: 'transfer',
        args: ['0x000000000000000000000000000000000000dEaD', 1n],
      }),
    })
    return (gas * 13n) / 10n
  } catch {
    return FALLBACK_TRANSFER_GAS
  }
}

export async function pendingNonce(client: ChainPublicClient, address: Address): Promise<number> {
  return client.getTransactionCount({ address, blockTag: 'pending' })
}

export interface SignedTransfer {
  rawTx: Hex
  hash: Hash
}

/**
 * Signs `usdc.transfer(to, amount)` for one nonce, locally (no RPC): the hash is known before anything is
 * sent, so it can be recorded first and looked up after a crash.
 */
export async function signTransfer(
  account: PrivateKeyAccount,
  p: {
    chainId: number
    usdc: Address
    to: Address
    amountAtomic: bigint
    nonce: number
    gas: bigint
    fees: FeeQuote
  },
): Promise<SignedTransfer> {
  if (p.to === zeroAddress) throw new Error('refusing to sign a payout to the zero address')
  const data = encodeFunctionData({ abi: usdcAbi, functionName: 'transfer', args: [p.to, p.amountAtomic] })
  return signCall(account, { ...p, to: p.usdc, data })
}

export type BroadcastResult =
  | { ok: true }
  | {
      ok: false
      reason: 'already_known' | 'nonce_too_low' | 'insufficient_funds' | 'underpriced' | 'rpc_error'
      message: string
    }

/** Sends a signed transaction. Sending the same bytes again is harmless: same hash, same nonce. */
export async function broadcast(client: ChainPublicClient, rawTx: Hex): Promise<BroadcastResult> {
  try {
    await client.sendRawTransaction({ serializedTransaction: rawTx })
    return { ok: true }
  } catch (err) {
    const message = errorText(err)
    if (/already known|already imported|known transaction|already exists/i.test(message))
      return { ok: false, reason: 'already_known', message }
    if (/nonce too low|nonce.{0,20}too low|noncetoolow|nonce has already been used/i.test(message))
      return { ok: false, reason: 'nonce_too_low', message }
    if (/insufficient funds|lack of funds|insufficient balance/i.test(message))
      return { ok: false, reason: 'insufficient_funds', message }
    if (/underpriced|fee cap|less than (the )?block base fee|max fee per gas/i.test(message))
      return { ok: false, reason: 'underpriced', message }
    return { ok: false, reason: 'rpc_error', message: message.slice(0, 500) }
  }
}

export type PayoutTxState =
  /** One of the hashes is mined with enough confirmations. */
  | { state: 'final'; hash: Hash; success: boolean; blockNumber: bigint }
  /** Mined, waiting for confirmations. */
  | { state: 'mined'; hash: Hash; blockNumber: bigint }
  /** The nonce was used by a transaction that is none of ours: this payout can never be mined. */
  | { state: 'nonce_taken' }
  /** Not mined; the nonce is still free (in the mempool, or never sent). */
  | { state: 'unmined' }

/**
 * What became of a payout's nonce. The account's mined nonce is read BEFORE the receipts: if the nonce was
 * already used at that moment and none of our hashes has a receipt afterwards, ours was not the one mined.
 */
export async function lookupPayoutTx(
  client: ChainPublicClient,
  p: { treasury: Address; nonce: number; hashes: Hash[]; confirmations: number },
): Promise<PayoutTxState> {
  const minedNonce = await client.getTransactionCount({ address: p.treasury, blockTag: 'latest' })
  // Only "no receipt" means not mined: a failed look-up throws (see ./not-found.ts), the payout stays open.
  const receipts = await Promise.all(
    p.hashes.map((hash) => nullIfNotFound(client.getTransactionReceipt({ hash }))),
  )
  const receipt = receipts.find((r) => r !== null)
  if (receipt) {
    const head = await client.getBlockNumber({ cacheTime: 0 })
    if (head - receipt.blockNumber + 1n < BigInt(p.confirmations)) {
      return { state: 'mined', hash: receipt.transactionHash, blockNumber: receipt.blockNumber }
    }
    return {
      state: 'final',
      hash: receipt.transactionHash,
      success: receipt.status === 'success',
      blockNumber: receipt.blockNumber,
    }
  }
  if (minedNonce > p.nonce) return { state: 'nonce_taken' }
  return { state: 'unmined' }
}

function errorText(err: unknown): string {
  const parts: string[] = []
  let e: unknown = err
  for (let i = 0; i < 5 && e; i++) {
    const x = e as { details?: string; shortMessage?: string; message?: string; cause?: unknown }
    parts.push(x.details ?? '', x.shortMessage ?? '', x.message ?? '')
    e = x.cause
  }
  return parts.filter(Boolean).join(' | ')
}
