// Proves what a transaction-hash proof paid: the USDC it moved to the treasury, by whom, and when.
// Every expected outcome is a value with a wire reason; it never throws. Amounts are the caller's business.

import { setTimeout as sleep } from 'node:timers/promises'
import { type Address, type Client, getAddress, type Hash, type TransactionReceipt } from 'viem'
import { getBlock, getBlockNumber, getTransaction, getTransactionReceipt } from 'viem/actions'
import { nullIfNotFound } from './not-found.ts'
import {
  authorizationsOf,
  decodeTransferLog,
  isMint,
  sameAddress,
  type TreasuryTransfer,
  type UsedAuthorization,
} from './transfer.ts'

export type TransferFailure =
  | 'payment_pending'
  | 'transaction_not_found'
  | 'transaction_failed'
  | 'wrong_asset'
  | 'wrong_recipient'
  | 'no_transfer'
  | 'proof_too_old'
  | 'rpc_unavailable'
  /** Sent by tollgate itself (a settlement): its money is already the payments' it carried. */
  | 'own_settlement'
  /** Made by an EIP-3009 authorization: its money is that authorization's (x402, MPP), not the hash's. */
  | 'authorization_transfer'

export type VerifyTransferResult =
  | { ok: true; transfer: TreasuryTransfer }
  | { ok: false; reason: TransferFailure; retryAfterMs?: number; detail?: string }

export interface VerifyTransferOptions {
  usdc: Address
  treasury: Address
  confirmations: number
  maxAgeMs: number
  /** How long to wait for a transaction that is not mined (or not confirmed) yet. */
  waitMs: number
  /**
   * How long a hash the node has never seen (no receipt, not in its mempool) is asked about before it is
   * answered transaction_not_found; once the node knows it, the wait runs to waitMs. Default: waitMs.
   */
  unseenWaitMs?: number
  now?: () => number
  /** Default 250 ms. */
  pollIntervalMs?: number
  /** The chain's block time, for the retry hint. Default 2000 ms (Base). */
  blockTimeMs?: number
}

export interface VerifyTransferParams extends VerifyTransferOptions {
  hash: Hash
}

const UNSEEN_POLL_MAX_MS = 1000

type Classified =
  | { ok: true; from: Address; value: bigint; authorizations: UsedAuthorization[] }
  | { ok: false; reason: TransferFailure }

export async function verifyTransfer(
  client: Client,
  params: VerifyTransferParams,
): Promise<VerifyTransferResult> {
  const { hash, confirmations } = params
  const now = params.now ?? Date.now
  const pollIntervalMs = params.pollIntervalMs ?? 250
  // A hash the node has not seen is asked about less and less often (doubling up to UNSEEN_POLL_MAX_MS):
  // a transaction on its way shows up within a second or so, and one that never will (a typo, junk) should
  // not cost the operator's RPC quota 4 requests a second for the whole wait.
  let unseenPollMs = pollIntervalMs
  const blockTimeMs = params.blockTimeMs ?? 2000
  // Waiting runs on the monotonic clock; `now` is only the (injectable) wall clock for the proof's age.
  const started = performance.now()
  const deadline = started + params.waitMs
  // A hash nobody has shown the node is most likely junk or a typo, and each one held a connection and 39
  // calls for the whole waitMs: it gets the short wait; a transaction the node knows gets the whole one.
  const unseenWaitMs = Math.min(params.unseenWaitMs ?? params.waitMs, params.waitMs)
  const unseenDeadline = started + unseenWaitMs
  let known = false
  let first = true
  try {
    for (;;) {
      // The first look is one batched HTTP request: the receipt and the head it is measured against (a cold
      // proof of a mined transfer costs just that). Later looks at a hash still unseen ask for the receipt
      // and the mempool instead (again one request): the head only matters once there is a receipt.
      const unseen: boolean = !first && !known
      first = false
      const [receipt, head, inMempool]: [TransactionReceipt | null, bigint | null, boolean] =
        await Promise.all([
          receiptOrNull(client, hash),
          unseen ? null : getBlockNumber(client, { cacheTime: 0 }),
          unseen ? isKnown(client, hash) : false,
        ])
      known ||= inMempool
      let pending: { retryAfterMs: number; detail: string }
      if (receipt) {
        known = true
        // A reverted transaction can carry no transfer, however long we wait.
        if (receipt.status === 'reverted') return { ok: false, reason: 'transaction_failed' }
        const paid = classifyLogs(receipt, params.usdc, params.treasury)
        if (!paid.ok) return paid
        const depth = (head ?? (await getBlockNumber(client, { cacheTime: 0 }))) - receipt.blockNumber + 1n
        if (depth >= BigInt(confirmations)) {
          const timestampMs = await blockTimestampMs(client, receipt)
          if (now() - timestampMs > params.maxAgeMs) return { ok: false, reason: 'proof_too_old' }
          const { from, value, authorizations } = paid
          const { blockNumber } = receipt
          const sender = getAddress(receipt.from)
          return {
            ok: true,
            transfer: { hash, from, sender, value, authorizations, blockNumber, timestampMs },
          }
        }
        // depth can be ≤ 0 behind a load balancer whose nodes lag each other: same answer, wait.
        const missing = BigInt(confirmations) - (depth > 0n ? depth : 0n)
        pending = {
          retryAfterMs: Number(missing) * blockTimeMs,
          detail: `mined, ${missing} more confirmation(s) needed`,
        }
      } else {
        // Known-but-unmined and not-yet-seen are both waited for (the transaction may still be propagating
        // to this node), the unseen one only until unseenDeadline.
        if (!unseen) known ||= await isKnown(client, hash)
        pending = known
          ? { retryAfterMs: blockTimeMs, detail: 'transaction not mined yet' }
          : { retryAfterMs: blockTimeMs, detail: 'transaction not known to the node yet' }
      }
      const left = (known ? deadline : unseenDeadline) - performance.now()
      if (left <= 0) {
        // Never seen in the whole wait: a typo or a hash from another network, not a payment on its way. A
        // final answer (no Retry-After), or an agent would retry it for ever.
        if (!known)
          return {
            ok: false,
            reason: 'transaction_not_found',
            detail: `the chain has not seen this transaction in ${unseenWaitMs} ms; check the hash and the network`,
          }
        return { ok: false, reason: 'payment_pending', ...pending }
      }
      const pauseMs = known ? pollIntervalMs : unseenPollMs
      if (!known) unseenPollMs = Math.min(unseenPollMs * 2, Math.max(pollIntervalMs, UNSEEN_POLL_MAX_MS))
      await sleep(Math.min(pauseMs, left))
    }
  } catch {
    // Unknown is not "unpaid": the caller answers 503 and the payer retries; never a pass, never a 402.
    return { ok: false, reason: 'rpc_unavailable', retryAfterMs: 1000 }
  }
}

/**
 * Shares one verification among concurrent callers of the same hash (one RPC sequence however many
 * requests wait on it); the entry is dropped when it settles, so a later call asks the chain again.
 */
export function createTransferVerifier(
  client: Client,
  options: VerifyTransferOptions,
): (hash: Hash) => Promise<VerifyTransferResult> {
  const inflight = new Map<string, Promise<VerifyTransferResult>>()
  return (hash) => {
    const key = hash.toLowerCase()
    let pending = inflight.get(key)
    if (!pending) {
      pending = verifyTransfer(client, { ...options, hash }).finally(() => inflight.delete(key))
      inflight.set(key, pending)
    }
    return pending
  }
}

/**
 * The proof's block time. Nodes that put `blockTimestamp` on receipt logs (anvil, geth ≥ 1.16, reth) save
 * a second round trip, so a cold proof costs one batched request (receipt + head); others are asked.
 */
async function blockTimestampMs(client: Client, receipt: TransactionReceipt): Promise<number> {
  const carried = receipt.logs[0]?.blockTimestamp
  if (typeof carried === 'bigint') return Number(carried) * 1000
  const block = await getBlock(client, { blockNumber: receipt.blockNumber })
  return Number(block.timestamp) * 1000
}

function classifyLogs(receipt: TransactionReceipt, usdc: Address, treasury: Address): Classified {
  let from: Address | null = null
  let value = 0n
  const payers = new Set<string>()
  let anyTransfer = false
  let otherTokenToTreasury = false
  let usdcElsewhere = false
  for (const log of receipt.logs) {
    const transfer = decodeTransferLog(log)
    if (!transfer || isMint(transfer)) continue
    anyTransfer = true
    const isUsdc = sameAddress(transfer.token, usdc)
    const toTreasury = sameAddress(transfer.to, treasury)
    if (isUsdc && toTreasury) {
      from ??= transfer.from
      value += transfer.value
      payers.add(transfer.from.toLowerCase())
    } else if (toTreasury) otherTokenToTreasury = true
    else if (isUsdc) usdcElsewhere = true
  }
  if (from) return { ok: true, from, value, authorizations: authorizationsOf(receipt.logs, usdc, payers) }
  if (otherTokenToTreasury) return { ok: false, reason: 'wrong_asset' }
  if (usdcElsewhere) return { ok: false, reason: 'wrong_recipient' }
  // Some other token to someone else: not USDC is what the payer must fix first.
  if (anyTransfer) return { ok: false, reason: 'wrong_asset' }
  return { ok: false, reason: 'no_transfer' }
}

function receiptOrNull(client: Client, hash: Hash): Promise<TransactionReceipt | null> {
  return nullIfNotFound(getTransactionReceipt(client, { hash }))
}

async function isKnown(client: Client, hash: Hash): Promise<boolean> {
  return (await nullIfNotFound(getTransaction(client, { hash }))) !== null
}
