// x402 batch-settlement, the leader's side: sends the channel transactions the data plane asked
// for (deposits, cooperative refunds) and claims served vouchers, many channels per transaction. The
// treasury lock is held only around simulate + nonce + sign + broadcast; receipts are awaited outside it.
//
// Claims run on their own, slower period: a claim transaction covers every channel with served calls at
// that moment, so its cost is spread over all the calls since the last one. The payer's withdraw delay
// (900 s, the scheme's minimum) is far longer than that period: vouchers are claimed before any withdrawal
// can be finalized, which is how the scheme's withdrawals are honoured.
import { randomUUID } from 'node:crypto'
import { type Address, getAddress, type Hash, type Hex, parseEventLogs } from 'viem'
import {
  type ChannelOp,
  type ClaimableChannel,
  claimableChannels,
  confirmDeposit,
  confirmRefund,
  failChannelClaim,
  failChannelOp,
  findChannel,
  listSentChannelClaims,
  markChannelOpSent,
  openChannelOps,
  recordChannelClaimSent,
  recordChannelClaims,
  settleCoveredChannelCalls,
} from '../../books/channels.ts'
import {
  BATCH_SETTLEMENT_ADDRESS,
  batchSettlementAbi,
  type ChannelConfig,
  claimAndRefundCalldata,
  claimAndSettleCalldata,
  type VoucherClaim,
} from '../../chain/batch-channel.ts'
import { nullIfNotFound } from '../../chain/not-found.ts'
import { broadcast, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { signCall } from '../../chain/sign-call.ts'
import { whenAvailable } from '../../db/when-available.ts'
import { type BackgroundModule, type JobDeps, type TreasuryLock, unlocked } from './runner.ts'

/** Channels per claim transaction (calldata grows ~0.6 kB per channel). */
const CLAIM_MAX = 100

export function createVoucherClaimerJobs(
  deps: JobDeps,
  options: { treasuryLock?: TreasuryLock; opsIntervalMs?: number; claimIntervalMs?: number } = {},
): BackgroundModule {
  const lock = options.treasuryLock ?? unlocked
  return {
    jobs: [
      // A request waits on these: deposits before a channel's first call, refunds at its end.
      {
        name: 'batch-channel-ops',
        intervalMs: options.opsIntervalMs ?? 200,
        run: () => runChannelOps(deps, lock),
      },
      {
        name: 'batch-claims',
        intervalMs: options.claimIntervalMs ?? deps.config.x402.batch_claim_interval_ms,
        run: () => claimVouchers(deps, lock),
      },
    ],
  }
}

function toClaim(c: ClaimableChannel): VoucherClaim {
  return {
    config: c.config as unknown as ChannelConfig,
    maxClaimableAmount: BigInt(c.signed_max_atomic),
    signature: c.signature as Hex,
    totalClaimed: BigInt(c.captured_max),
  }
}

/**
 * Simulates, then sends from the treasury under the lock; null when the simulation reverted (with why).
 * The simulation is the on-chain verification of a deposit: signature, funds and unused authorization.
 */
async function send(
  deps: JobDeps,
  lock: TreasuryLock,
  data: Hex,
): Promise<{ hash: Hash } | { error: string }> {
  const { chain } = deps
  return lock(async () => {
    try {
      await chain.publicClient.call({
        account: chain.walletClient.account.address,
        to: BATCH_SETTLEMENT_ADDRESS,
        data,
      })
    } catch (err) {
      return { error: err instanceof Error ? err.message : String(err) }
    }
    const hash = await chain.walletClient.sendTransaction({
      account: chain.walletClient.account,
      chain: chain.walletClient.chain,
      to: BATCH_SETTLEMENT_ADDRESS,
      data,
    })
    return { hash }
  })
}

async function receiptOf(deps: JobDeps, hash: Hash) {
  return deps.chain.publicClient.waitForTransactionReceipt({ hash, timeout: 60_000 })
}

/** Every open op: sent ones resolved from their receipt, pending ones sent. */
export async function runChannelOps(deps: JobDeps, lock: TreasuryLock = unlocked): Promise<number> {
  let done = 0
  for (const op of await openChannelOps(deps.sql, 50)) {
    if (op.status === 'pending') {
      const data = op.kind === 'deposit' ? (op.calldata as Hex) : await refundData(deps, op)
      const sent = await send(deps, lock, data)
      if ('error' in sent) {
        await failChannelOp(deps.sql, { id: op.id, error: sent.error })
        deps.logger.warn('batch channel op refused by simulation', {
          op: op.id,
          kind: op.kind,
          err: sent.error.slice(0, 200),
        })
        continue
      }
      await markChannelOpSent(deps.sql, { id: op.id, hash: sent.hash })
      op.tx_hash = sent.hash
      op.status = 'sent'
    }
    await resolveOp(deps, op)
    done++
  }
  return done
}

/** A refund's transaction: claim what its channel served (settled to the treasury), then refund the rest. */
async function refundData(deps: JobDeps, op: ChannelOp): Promise<Hex> {
  const channel = await findChannel(deps.sql, op.channel_id)
  const [claimable] = await claimableChannels(deps.sql, { limit: 1, channelId: op.channel_id })
  const config = channel!.config as unknown as ChannelConfig
  return claimAndRefundCalldata(config, claimable ? toClaim(claimable) : null, op.amount_atomic)
}

async function resolveOp(deps: JobDeps, op: ChannelOp): Promise<void> {
  const hash = op.tx_hash as Hash
  const receipt = await receiptOf(deps, hash)
  if (receipt.status !== 'success') {
    await failChannelOp(deps.sql, { id: op.id, error: `transaction ${hash} reverted` })
    return
  }
  if (op.kind === 'deposit') {
    await confirmDeposit(deps.sql, { id: op.id })
    return
  }
  // The refund's claim (if any) is booked first, then the refund: the channel's charged part is settled.
  const claimed = parseEventLogs({
    abi: batchSettlementAbi,
    eventName: 'Claimed',
    logs: receipt.logs,
  }) as unknown as Array<{
    args: { channelId: Hex; totalClaimed: bigint }
  }>
  if (claimed.length > 0) {
    await recordChannelClaims(deps.sql, {
      claimId: `claim_${randomUUID()}`,
      hash,
      block: receipt.blockNumber,
      entries: claimed.map((l) => ({
        channelId: l.args.channelId.toLowerCase(),
        totalClaimed: l.args.totalClaimed,
      })),
    })
  }
  const refunded = parseEventLogs({
    abi: batchSettlementAbi,
    eventName: 'Refunded',
    logs: receipt.logs,
  }) as unknown as Array<{
    args: { amount: bigint }
  }>
  await confirmRefund(deps.sql, { id: op.id, refunded: refunded[0]?.args.amount ?? 0n })
}

/** Claims every channel with served, unclaimed calls: one transaction per CLAIM_MAX channels. */
export async function claimVouchers(deps: JobDeps, lock: TreasuryLock = unlocked): Promise<number> {
  const { chain } = deps
  // A claim sent earlier (by this process, or one that died after its broadcast) is settled first: a new
  // claim of the same vouchers would be refused by the contract, or book them to the wrong transaction.
  if (!(await resolveSentClaims(deps, lock))) return 0
  let txs = 0
  // Calls written after the claim that covered them (served out of order): settled by that claim, before
  // anything new is claimed.
  const late = await settleCoveredChannelCalls(deps.sql, { limit: 1000 })
  if (late > 0)
    deps.logger.info('batch voucher calls settled by the claim that covered them', { calls: late })
  for (;;) {
    const due = await claimableChannels(deps.sql, { limit: CLAIM_MAX })
    if (due.length === 0) return txs
    const treasury: Address = getAddress(chain.treasury)
    const data = claimAndSettleCalldata(due.map(toClaim), treasury, getAddress(chain.usdc.address))
    const claimId = `claim_${randomUUID()}`
    const entries = due.map((c) => ({ channelId: c.channel_id, totalClaimed: BigInt(c.captured_max) }))
    const sent = await sendClaim(deps, lock, { claimId, data, entries })
    if ('error' in sent) {
      deps.logger.error('batch voucher claim refused by simulation; retried next run', {
        err: sent.error.slice(0, 300),
      })
      return txs
    }
    txs++
    // Not mined in time, or the RPC failed: the claim stays 'sent' and the next run looks it up.
    const receipt = await receiptOf(deps, sent.hash)
    if (receipt.status !== 'success') {
      await failChannelClaim(deps.sql, { claimId })
      deps.logger.error('batch voucher claim reverted; retried next run', { tx: sent.hash })
      return txs
    }
    await recordClaimed(deps, { claimId, hash: sent.hash, block: receipt.blockNumber, entries })
    if (due.length < CLAIM_MAX) return txs
  }
}

/**
 * The claim moved the money: its record is retried while the database is away (a restart). Dropped, the
 * claim would stay 'sent' until the next run found its receipt; it is idempotent (sent → done once, and
 * each update's condition).
 */
function recordClaimed(
  deps: JobDeps,
  q: {
    claimId: string
    hash: string
    block: bigint
    entries: Array<{ channelId: string; totalClaimed: bigint }>
  },
): Promise<number> {
  return whenAvailable(() => recordChannelClaims(deps.sql, q), {
    timeoutMs: deps.config.settlement.confirm_timeout_ms,
  })
}

/**
 * Simulates, signs locally, records the signed claim ('sent') and only then broadcasts, under the treasury
 * lock. A broadcast whose answer was lost or refused leaves the claim 'sent': the next run finds it mined,
 * waiting, or never sent (then sent again with the same bytes).
 */
async function sendClaim(
  deps: JobDeps,
  lock: TreasuryLock,
  q: { claimId: string; data: Hex; entries: Array<{ channelId: string; totalClaimed: bigint }> },
): Promise<{ hash: Hash } | { error: string }> {
  const { chain } = deps
  const account = chain.walletClient.account
  return lock(async () => {
    let gas: bigint
    try {
      // The simulation: a claim the contract would refuse is never signed.
      gas = await chain.publicClient.estimateGas({
        account: account.address,
        to: BATCH_SETTLEMENT_ADDRESS,
        data: q.data,
      })
    } catch (err) {
      return { error: err instanceof Error ? err.message : String(err) }
    }
    const [fees, nonce] = await Promise.all([
      quoteFees(chain.publicClient),
      pendingNonce(chain.publicClient, account.address),
    ])
    const { rawTx, hash } = await signCall(account, {
      chainId: chain.chainId,
      to: BATCH_SETTLEMENT_ADDRESS,
      data: q.data,
      nonce,
      gas: (gas * 13n) / 10n,
      fees,
    })
    await recordChannelClaimSent(deps.sql, { claimId: q.claimId, hash, rawTx, nonce, entries: q.entries })
    const r = await broadcast(chain.publicClient, rawTx)
    if (!r.ok && r.reason !== 'already_known') {
      deps.logger.warn('batch voucher claim broadcast failed; looked up next run', {
        tx: hash,
        reason: r.reason,
        message: r.message.slice(0, 160),
      })
    }
    return { hash }
  })
}

/**
 * Resolves the claims recorded 'sent': mined (booked, or failed if it reverted), still waiting in the
 * node's pool, lost with its nonce taken by another transaction (failed: nothing moved), or unknown to the
 * node with its nonce still free (broadcast again, the same bytes). true when none is left open.
 */
async function resolveSentClaims(deps: JobDeps, lock: TreasuryLock): Promise<boolean> {
  const { chain } = deps
  const client = chain.publicClient
  let open = false
  for (const c of await listSentChannelClaims(deps.sql)) {
    const hash = c.tx_hash as Hash
    // A failed look-up throws (the run ends, the next one asks again): unknown is not "lost".
    const receipt = await nullIfNotFound(client.getTransactionReceipt({ hash }))
    const entries = c.entries.map((e) => ({ channelId: e.channel_id, totalClaimed: BigInt(e.total_claimed) }))
    if (receipt?.status === 'success') {
      await recordClaimed(deps, { claimId: c.id, hash, block: receipt.blockNumber, entries })
      continue
    }
    if (receipt) {
      await failChannelClaim(deps.sql, { claimId: c.id })
      deps.logger.error('batch voucher claim reverted; retried next run', { tx: hash })
      continue
    }
    if (await nullIfNotFound(client.getTransaction({ hash }))) {
      open = true
      continue
    }
    const used = await client.getTransactionCount({
      address: chain.walletClient.account.address,
      blockTag: 'latest',
    })
    if (BigInt(used) > BigInt(c.nonce)) {
      await failChannelClaim(deps.sql, { claimId: c.id })
      deps.logger.warn(
        'batch voucher claim never mined, its nonce used by another transaction; claimed again',
        {
          tx: hash,
        },
      )
      continue
    }
    open = true
    await lock(() => broadcast(client, c.raw_tx as Hex))
  }
  return !open
}
