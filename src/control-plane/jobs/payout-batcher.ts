// Payout batcher: pays each wallet's unpaid owner shares and refunds from the treasury,
// one USDC transfer per wallet. Order of every run, and why:
//   1. resolve what an earlier run (or a crashed process) left open, by asking the chain about its nonce
//      and hashes — nothing new is signed while anything is open, so a payout is never sent twice;
//   2. record the new batch (amounts, entries, nonces, signed transactions) in one transaction;
//   3. only then broadcast, wait for confirmations, and mark each payout with its events.
// The treasury lock (shared with x402 settlement, one nonce sequence) is held only from the nonce read to the
// broadcast of what was signed, and around each re-broadcast: never while waiting for confirmations, so an
// authorization is not kept from settling before its validBefore by a payout batch waiting on blocks.
import type { Address, Hash, Hex } from 'viem'
import {
  type BatchRefusal,
  confirmPayout,
  failPayout,
  markPayoutSubmitted,
  recordBroadcastError,
  recordPayouts,
} from '../../books/payouts.ts'
import {
  broadcast,
  estimateTransferGas,
  lookupPayoutTx,
  type PayoutTxState,
  pendingNonce,
  quoteFees,
  readTreasuryFunds,
  signTransfer,
} from '../../chain/payouts.ts'
import { someWalletOwedAtLeast } from '../../db/ledger.ts'
import { openPayouts, type PayoutRow } from '../../db/payouts.ts'
import { configDollars, formatDollars } from '../../money.ts'
import {
  payoutAtomic,
  payoutBatches,
  payoutBlocked,
  payoutFailures,
  payoutsOpen,
} from '../../observability/metrics.ts'
import { faultPoint } from './fault-point.ts'
import { reconcile } from './reconcile.ts'
import { type BackgroundModule, type JobDeps, type TreasuryLock, unlocked } from './runner.ts'

/** Session lock held for a whole run on a server database: two instances never run a batch at once. */
const PAYOUT_RUN_LOCK = 7_301_005

export type RunOutcome =
  | { outcome: 'sent'; payouts: number; confirmed: number; open: number }
  | { outcome: 'idle'; waiting: number }
  | { outcome: 'blocked'; reason: BatchRefusal['reason']; detail: string }
  | { outcome: 'open'; open: number }
  | { outcome: 'busy' }

/** How long a payout's nonce must read as used by another transaction before the payout is called failed. */
const NONCE_TAKEN_RECHECK_MS = 1_000

export class PayoutBatcher {
  private inflight: Promise<RunOutcome> | null = null
  private blocked: BatchRefusal | null = null
  private readonly minAtomic: bigint
  private readonly thresholdAtomic: bigint

  constructor(
    private readonly deps: JobDeps,
    private readonly treasuryLock: TreasuryLock = unlocked,
  ) {
    const { payouts } = deps.config
    const min = configDollars(payouts.min_amount)
    this.minAtomic = min > 0n ? min : 1n
    this.thresholdAtomic = configDollars(payouts.threshold)
  }

  /** One run at a time per process; concurrent callers share it. */
  run(): Promise<RunOutcome> {
    this.inflight ??= this.runExclusive().finally(() => {
      this.inflight = null
    })
    return this.inflight
  }

  /** The early trigger: a wallet over the threshold, payouts left open (e.g. by a crash), or a stopped batch. */
  async runIfDue(): Promise<RunOutcome | null> {
    const { sql } = this.deps
    const [open] = await sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM payouts WHERE status IN ('pending', 'submitted')`
    const due =
      (open?.n ?? 0) > 0 ||
      this.blocked !== null ||
      (await someWalletOwedAtLeast(sql, { minAtomic: this.thresholdAtomic > 0n ? this.thresholdAtomic : 1n }))
    return due ? this.run() : null
  }

  readiness(): { ok: boolean; detail?: string } {
    if (this.blocked) return { ok: false, detail: this.blocked.detail }
    return { ok: true }
  }

  async stop(): Promise<void> {
    await this.inflight?.catch(() => {})
  }

  private async runExclusive(): Promise<RunOutcome> {
    const { sql, embedded } = this.deps
    // The embedded database is one process's single session: the in-process guard above is enough there.
    const conn = embedded ? null : await sql.reserve()
    try {
      if (conn) {
        const [row] = await conn<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(${PAYOUT_RUN_LOCK}) AS ok`
        if (!row?.ok) {
          payoutBatches.inc({ outcome: 'busy' })
          return { outcome: 'busy' }
        }
      }
      try {
        const result = await this.runOnce()
        payoutBatches.inc({ outcome: result.outcome })
        return result
      } catch (err) {
        payoutBatches.inc({ outcome: 'error' })
        throw err
      } finally {
        if (conn) await conn`SELECT pg_advisory_unlock(${PAYOUT_RUN_LOCK})`.catch(() => {})
      }
    } finally {
      conn?.release()
    }
  }

  private async runOnce(): Promise<RunOutcome> {
    const { sql, logger } = this.deps
    // 1. Whatever is open is resolved first: nothing new is signed while the chain's answer is unknown.
    const stillOpen = await this.settleOpen()
    if (stillOpen > 0) return { outcome: 'open', open: stillOpen }

    if (!(await someWalletOwedAtLeast(sql, { minAtomic: this.minAtomic }))) {
      this.clearBlocked()
      return { outcome: 'idle', waiting: 0 }
    }

    // 2. Record the batch and broadcast it, holding the treasury lock from the nonce read to the broadcast.
    const recorded = await this.treasuryLock(() => this.recordAndBroadcast())
    if (recorded.outcome !== 'recorded') return recorded
    logger.info('payout batch recorded', {
      payouts: recorded.payouts,
      total_atomic: recorded.totalAtomic,
      first_nonce: recorded.firstNonce,
    })

    // 3. Confirm and mark (unlocked: re-broadcasts take the lock one at a time).
    const open = await this.settleOpen()
    return { outcome: 'sent', payouts: recorded.payouts, confirmed: this.lastConfirmed, open }
  }

  /** Reads the nonce, records the signed batch, broadcasts it: the whole critical section of a payout run. */
  private async recordAndBroadcast(): Promise<
    | { outcome: 'recorded'; payouts: number; totalAtomic: bigint; firstNonce: bigint }
    | Exclude<RunOutcome, { outcome: 'sent' | 'open' | 'busy' }>
  > {
    const { sql, chain, config } = this.deps
    // Chain reads happen before the transaction; signing inside it is local.
    const treasury = chain.treasury
    const [funds, fees, gas, nonce] = await Promise.all([
      readTreasuryFunds(chain.publicClient, { treasury, usdc: chain.usdc.address }),
      quoteFees(chain.publicClient),
      estimateTransferGas(chain.publicClient, { treasury, usdc: chain.usdc.address }),
      pendingNonce(chain.publicClient, treasury),
    ])
    const account = chain.walletClient.account
    const result = await recordPayouts(sql, {
      treasury,
      firstNonce: nonce,
      minAtomic: this.minAtomic,
      maxWallets: config.payouts.max_wallets_per_batch,
      maxEntries: config.payouts.max_entries_per_batch,
      afford: (total, count) => {
        if (funds.usdcAtomic < total) {
          return {
            reason: 'usdc_short',
            detail:
              `treasury ${treasury} holds ${formatDollars(funds.usdcAtomic)} USDC but the next payout batch ` +
              `needs ${formatDollars(total)} USDC (${count} payouts); top it up with at least ` +
              `${formatDollars(total - funds.usdcAtomic)} USDC. Nothing was sent or marked paid.`,
          }
        }
        const weiNeeded = gas * fees.maxFeePerGas * BigInt(count)
        if (funds.wei < weiNeeded) {
          return {
            reason: 'gas_short',
            detail:
              `treasury ${treasury} holds ${funds.wei} wei but ${count} payout transfers may cost up to ` +
              `${weiNeeded} wei of gas; send it native currency for gas. Nothing was sent or marked paid.`,
          }
        }
        return null
      },
      sign: ({ wallet, amountAtomic, nonce }) =>
        signTransfer(account, {
          chainId: chain.chainId,
          usdc: chain.usdc.address,
          to: wallet as Address,
          amountAtomic,
          nonce,
          gas,
          fees,
        }),
    })
    if (!result.ok) {
      this.setBlocked(result.refusal)
      return { outcome: 'blocked', reason: result.refusal.reason, detail: result.refusal.detail }
    }
    this.clearBlocked()
    if (result.payouts.length === 0) return { outcome: 'idle', waiting: result.waiting }
    // Broadcast what was just signed before another sender may read the treasury's nonce.
    const open = await openPayouts(sql)
    const mine = new Set(result.payouts.map((p) => p.id))
    await this.broadcastAll(
      open.filter((p) => mine.has(p.id)),
      new Set(),
    )
    return {
      outcome: 'recorded',
      payouts: result.payouts.length,
      totalAtomic: result.payouts.reduce((s, p) => s + p.amount_atomic, 0n),
      firstNonce: BigInt(result.payouts[0]!.nonce),
    }
  }

  private lastConfirmed = 0

  /**
   * Drives every open payout to an outcome: looks each one up on chain (nonce, then receipts), broadcasts
   * the recorded bytes of those not mined, and marks confirmed/failed with their events. Returns how many
   * are still open when confirm_timeout_ms runs out (the next run continues with them).
   */
  private async settleOpen(): Promise<number> {
    const { sql, config, logger } = this.deps
    const deadline = Date.now() + config.payouts.confirm_timeout_ms
    const sentThisRun = new Set<string>()
    // Payouts whose nonce the chain shows used while no receipt of theirs was found, and when first seen so.
    const nonceSeenTaken = new Map<string, number>()
    this.lastConfirmed = 0
    for (;;) {
      const open = await openPayouts(sql)
      payoutsOpen.set(open.length)
      if (open.length === 0) return 0
      const states = await this.lookupAll(open)
      const unmined: PayoutRow[] = []
      for (let i = 0; i < open.length; i++) {
        const p = open[i]!
        const st = states[i]!
        if (st.state === 'final') {
          faultPoint('payout:after_confirm')
          if (st.success) await this.markConfirmed(p, st.hash, st.blockNumber)
          else
            await this.markFailed(p, 'reverted', `transaction ${st.hash} reverted`, st.hash, st.blockNumber)
        } else if (st.state === 'nonce_taken') {
          // Another transaction of the treasury used this nonce: ours can never be mined. Retry at once. But
          // only once it still reads so a second later: under load the node has answered the account's new
          // nonce before the receipt of the very transaction that used it (a payout then marked failed was
          // paid again, and reconcile found its transaction had moved the money).
          const first = nonceSeenTaken.get(p.id)
          if (first === undefined) nonceSeenTaken.set(p.id, Date.now())
          else if (Date.now() - first >= NONCE_TAKEN_RECHECK_MS)
            await this.markFailed(p, 'nonce_taken', `nonce ${p.nonce} was used by another transaction`)
        } else if (st.state === 'unmined' && !sentThisRun.has(p.id)) unmined.push(p)
      }
      const gasShort =
        unmined.length === 0 ? null : await this.treasuryLock(() => this.broadcastAll(unmined, sentThisRun))
      if (gasShort) {
        this.setBlocked({
          reason: 'gas_short',
          detail:
            `treasury ${this.deps.chain.treasury} cannot pay the gas of its recorded payouts (${gasShort.slice(0, 200)}); ` +
            'send it native currency for gas. Recorded payouts are sent as soon as it can; nothing was marked paid.',
        })
        return (await openPayouts(sql)).length
      }
      if (Date.now() > deadline) {
        const left = (await openPayouts(sql)).length
        if (left) logger.warn('payouts still unconfirmed; the next run continues', { open: left })
        return left
      }
      await new Promise((r) => setTimeout(r, Math.min(config.chain.poll_interval_ms, 1000)))
    }
  }

  /**
   * Broadcasts recorded payouts in nonce order (their bytes, signed when recorded). Stops at the first that
   * cannot pay its gas (a later nonce cannot be mined before it) and returns why; null when all went out.
   */
  private async broadcastAll(payouts: PayoutRow[], sentThisRun: Set<string>): Promise<string | null> {
    const { sql, logger } = this.deps
    for (const p of payouts) {
      faultPoint('payout:before_broadcast')
      const sent = await broadcast(this.deps.chain.publicClient, p.raw_tx as Hex)
      faultPoint('payout:after_broadcast')
      sentThisRun.add(p.id)
      if (sent.ok || sent.reason === 'already_known' || sent.reason === 'nonce_too_low') {
        // nonce_too_low: mined meanwhile (ours or not); the next look-up tells which.
        await markPayoutSubmitted(sql, p.id)
        continue
      }
      await recordBroadcastError(sql, p.id, `${sent.reason}: ${sent.message}`)
      logger.warn('payout broadcast refused', { payout: p.id, nonce: p.nonce, reason: sent.reason })
      if (sent.reason === 'insufficient_funds') return sent.message
    }
    return null
  }

  private async lookupAll(open: PayoutRow[]): Promise<PayoutTxState[]> {
    const out: PayoutTxState[] = []
    // Chunks keep one batched JSON-RPC request reasonable.
    for (let i = 0; i < open.length; i += 100) {
      const chunk = open.slice(i, i + 100)
      out.push(
        ...(await Promise.all(
          chunk.map((p) =>
            lookupPayoutTx(this.deps.chain.publicClient, {
              treasury: p.treasury as Address,
              nonce: Number(p.nonce),
              hashes: [p.tx_hash, ...p.previous_tx_hashes] as Hash[],
              confirmations: this.deps.config.chain.confirmations,
            }),
          ),
        )),
      )
    }
    return out
  }

  private async markConfirmed(p: PayoutRow, hash: string, blockNumber: bigint): Promise<void> {
    const done = await confirmPayout(this.deps.sql, { id: p.id, hash, blockNumber })
    // Refused: another run resolved it first.
    if (!done.ok) return
    this.lastConfirmed++
    payoutAtomic.inc({ kind: p.kind }, Number(p.amount_atomic))
    this.deps.logger.info('payout confirmed', {
      payout: p.id,
      wallet: p.wallet,
      amount_atomic: p.amount_atomic,
      tx: hash,
    })
  }

  private async markFailed(
    p: PayoutRow,
    reason: 'reverted' | 'nonce_taken',
    error: string,
    hash?: string,
    blockNumber?: bigint,
  ): Promise<void> {
    const { retry_base_ms, retry_max_ms } = this.deps.config.payouts
    const delay =
      reason === 'nonce_taken' ? 0 : Math.min(retry_base_ms * 2 ** Math.max(0, p.attempts - 1), retry_max_ms)
    const row = await failPayout(this.deps.sql, {
      id: p.id,
      error,
      retryAt: new Date(Date.now() + delay),
      hash,
      blockNumber,
    })
    if (!row.ok) return
    payoutFailures.inc({ reason })
    this.deps.logger.error('payout failed; its entries are batched again after the backoff', {
      payout: p.id,
      wallet: p.wallet,
      reason,
      error,
      retry_in_ms: delay,
    })
  }

  private setBlocked(refusal: BatchRefusal): void {
    if (this.blocked?.detail !== refusal.detail) {
      this.deps.logger.error('payouts stopped: treasury short', {
        reason: refusal.reason,
        detail: refusal.detail,
      })
    }
    this.blocked = refusal
    payoutBlocked.set({ reason: 'usdc_short' }, refusal.reason === 'usdc_short' ? 1 : 0)
    payoutBlocked.set({ reason: 'gas_short' }, refusal.reason === 'gas_short' ? 1 : 0)
  }

  private clearBlocked(): void {
    if (this.blocked) this.deps.logger.info('payouts resumed: the treasury can pay the batch')
    this.blocked = null
    payoutBlocked.set({ reason: 'usdc_short' }, 0)
    payoutBlocked.set({ reason: 'gas_short' }, 0)
  }
}

export function createPayoutJobs(
  deps: JobDeps,
  options: { treasuryLock?: TreasuryLock } = {},
): BackgroundModule {
  // The batcher takes the treasury lock itself, only around nonce, signing and broadcasts.
  const batcher = new PayoutBatcher(deps, options.treasuryLock)
  return {
    jobs: [
      {
        name: 'payout-batch',
        intervalMs: deps.config.payouts.interval_ms,
        run: () => batcher.run(),
      },
      {
        name: 'payout-threshold',
        intervalMs: deps.config.payouts.threshold_check_interval_ms,
        run: () => batcher.runIfDue(),
      },
    ],
    readiness: [{ name: 'payouts', check: async () => batcher.readiness() }],
    adminRoutes: {
      '/reconcile': async () => {
        const toMs = Date.now()
        const report = await reconcile(
          { sql: deps.sql, chain: deps.chain, config: deps.config },
          { fromMs: toMs - deps.config.payouts.reconcile_range_ms, toMs },
        )
        return { status: report.ok ? 200 : 409, body: report }
      },
    },
    stop: () => batcher.stop(),
  }
}
