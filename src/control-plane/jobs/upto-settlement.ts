// Settles the x402 `upto` permits of captured calls for their charges, on the leader, the way the exact
// settlement job does (./settlement-batcher.ts): soonest deadline first; signed locally, hashes recorded
// before broadcast, broadcast in nonce order under the treasury lock, receipts awaited outside it. Permits
// naming tollgate's UptoSettlementBatcher go settlement.per_transaction to a transaction; permits naming
// the treasury itself (a chain without the batcher) one each. A call charged nothing sends nothing.
import type { Hash, Hex, TransactionReceipt } from 'viem'
import {
  failUptoSettlement,
  forgetUptoSettlementTx,
  listDueUptoSettlements,
  listSentUptoSettlements,
  readUptoSettlementBacklog,
  recordUptoSettlementTx,
  settleUptoClaims,
  type UptoSettlementCandidate,
  type UptoSettlementFailure,
} from '../../books/upto-settlement.ts'
import { nullIfNotFound } from '../../chain/not-found.ts'
import { broadcast, type FeeQuote, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { sameAddress } from '../../chain/transfer.ts'
import { isPermit2NonceUsed } from '../../chain/upto-permit.ts'
import {
  signUptoSettlement,
  type UptoOutcome,
  uptoBatcherAddress,
  uptoSettlementOutcomes,
} from '../../chain/upto-settle.ts'
import { settleBeforeAnswerUnavailable } from '../../config/settle-before-answer.ts'
import { uptoSettlements } from '../../observability/metrics.ts'
import { type BackgroundModule, type JobDeps, type TreasuryLock, unlocked } from './runner.ts'

export const UPTO_SETTLEMENT_JOB = 'x402-upto-settlement'

export function createUptoSettlementJobs(
  deps: JobDeps,
  options: { treasuryLock?: TreasuryLock } = {},
): BackgroundModule {
  return {
    jobs: [
      {
        name: UPTO_SETTLEMENT_JOB,
        intervalMs: deps.config.settlement.interval_ms,
        run: () => settleUptoPermits(deps, options.treasuryLock ?? unlocked),
      },
    ],
    readiness: [
      {
        // Red while the soonest-expiring unsettled permit is closer to its deadline than the margin: served
        // calls are about to become unpaid.
        name: 'x402_upto_settlement',
        check: async () => {
          const b = await readUptoSettlementBacklog(deps.sql)
          if (b.soonestDeadlineS === null) return { ok: true, detail: 'no backlog' }
          const leftS = Math.round(b.soonestDeadlineS - Date.now() / 1000)
          const detail = `${b.count} unsettled, soonest deadline in ${leftS} s`
          return { ok: leftS > deps.config.settlement.readiness_margin_s, detail }
        },
      },
    ],
  }
}

interface SignedUpto {
  items: UptoSettlementCandidate[]
  rawTx: Hex
  hash: Hash
}

/** Settles everything due, step after step while a backlog remains. Returns how many permits were sent. */
export async function settleUptoPermits(deps: JobDeps, lock: TreasuryLock): Promise<number> {
  // A settler records its hash with the capture and broadcasts right after: young and unknown to the node
  // is not lost yet (where settlers exist: a secret to derive their keys from).
  const early = deps.config.settlement.before_answer
  await resolveSent(
    deps,
    settleBeforeAnswerUnavailable(deps.config) === null ? early.window_ms + 2 * early.wait_ms : 0,
  )
  const limit = deps.config.settlement.batch_max
  let sent = 0
  for (;;) {
    const due = await listDueUptoSettlements(deps.sql, { limit })
    if (due.length === 0) break
    const r = await settleStep(deps, lock, due)
    sent += r.sent
    if (r.stopped || due.length < limit) break
  }
  return sent
}

/**
 * Settles without a transaction what needs none (a zero charge), fails what can never be sent (deadline
 * past, charge above the signed maximum, a facilitator that is not ours), and returns the rest.
 */
async function triage(deps: JobDeps, due: UptoSettlementCandidate[]): Promise<UptoSettlementCandidate[]> {
  const nowS = BigInt(Math.floor(Date.now() / 1000))
  const treasury = deps.chain.walletClient.account.address
  const facilitators = [treasury, uptoBatcherAddress(treasury)]
  const ours: UptoSettlementCandidate[] = []
  const zero: string[] = []
  for (const c of due) {
    const p = c.authorization_payload
    const charge = BigInt(c.charge_atomic)
    if (charge === 0n) zero.push(c.proof_key)
    // Verification accepts only these; another (the treasury key changed since) can never be settled by us.
    else if (!facilitators.some((f) => sameAddress(f, p.facilitator)))
      await fail(deps, c, null, 'not_our_facilitator')
    else if (charge > BigInt(p.amount)) await fail(deps, c, null, 'over_maximum')
    // Permit2 refuses after the deadline; the settlement must also be mined before it.
    else if (BigInt(p.deadline) <= nowS) await fail(deps, c, null, 'expired')
    else ours.push(c)
  }
  if (zero.length > 0) {
    const done = await settleUptoClaims(deps.sql, {
      settled: zero.map((proofKey) => ({ proofKey, settledAtomic: 0n })),
    })
    uptoSettlements.labels('zero_charge').inc(done.length)
  }
  return ours
}

/** Transactions to sign: the treasury's own permits one each, the batcher's per_transaction each. */
function groupsOf(deps: JobDeps, live: UptoSettlementCandidate[]): UptoSettlementCandidate[][] {
  const treasury = deps.chain.walletClient.account.address
  const per = deps.config.settlement.per_transaction
  const groups: UptoSettlementCandidate[][] = []
  const byFacilitator = new Map<string, UptoSettlementCandidate[]>()
  for (const c of live) {
    const f = c.authorization_payload.facilitator.toLowerCase()
    if (sameAddress(f, treasury)) groups.push([c])
    else byFacilitator.set(f, [...(byFacilitator.get(f) ?? []), c])
  }
  for (const items of byFacilitator.values())
    for (let i = 0; i < items.length; i += per) groups.push(items.slice(i, i + per))
  return groups
}

async function settleStep(
  deps: JobDeps,
  lock: TreasuryLock,
  due: UptoSettlementCandidate[],
): Promise<{ sent: number; stopped: boolean }> {
  const live = await triage(deps, due)
  if (live.length === 0) return { sent: 0, stopped: false }
  const groups = groupsOf(deps, live)
  const { inFlight, stopped } = await lock(async () => {
    const { publicClient, walletClient } = deps.chain
    const [fees, firstNonce] = await Promise.all([
      quoteFees(publicClient),
      pendingNonce(publicClient, walletClient.account.address),
    ])
    const signed = await Promise.all(
      groups.map(async (items, i) => ({ items, ...(await sign(deps, items, firstNonce + i, fees)) })),
    )
    const recorded = await recordUptoSettlementTx(
      deps.sql,
      // Each permit's place in its transaction, as the batcher's calldata carries them: for its receipt.
      signed.flatMap((s) =>
        s.items.map((c, index) => ({ proofKey: c.proof_key, hash: s.hash, index, count: s.items.length })),
      ),
    )
    return broadcastInOrder(deps, signed, recorded)
  })
  await awaitOutcomes(deps, inFlight)
  return { sent: inFlight.reduce((n, s) => n + s.items.length, 0), stopped }
}

function sign(
  { chain }: JobDeps,
  items: UptoSettlementCandidate[],
  nonce: number,
  fees: FeeQuote,
): Promise<{ rawTx: Hex; hash: Hash }> {
  return signUptoSettlement(chain.walletClient.account, {
    chainId: chain.chainId,
    items: items.map((c) => ({ permit: c.authorization_payload, amount: BigInt(c.charge_atomic) })),
    nonce,
    fees,
  })
}

/** Broadcasts in nonce order; a transaction with an unrecorded item, or a refused broadcast, stops the rest. */
async function broadcastInOrder(
  deps: JobDeps,
  signed: SignedUpto[],
  recorded: Set<string>,
): Promise<{ inFlight: SignedUpto[]; stopped: boolean }> {
  const out: SignedUpto[] = []
  for (const [i, s] of signed.entries()) {
    if (!s.items.every((c) => recorded.has(c.proof_key))) {
      await forgetRest(deps, signed.slice(i))
      return { inFlight: out, stopped: true }
    }
    const r = await broadcast(deps.chain.publicClient, s.rawTx)
    if (r.ok || r.reason === 'already_known') {
      out.push(s)
      continue
    }
    uptoSettlements.labels('broadcast_failed').inc(s.items.length)
    deps.logger.error('x402 upto settlement broadcast failed; will retry', {
      proof_keys: s.items.map((c) => c.proof_key),
      tx: s.hash,
      reason: r.reason,
    })
    await forgetRest(deps, signed.slice(i))
    return { inFlight: out, stopped: true }
  }
  return { inFlight: out, stopped: false }
}

async function awaitOutcomes(deps: JobDeps, inFlight: SignedUpto[]): Promise<void> {
  const { chain, config, logger } = deps
  await Promise.all(
    inFlight.map(async (s) => {
      let receipt: TransactionReceipt
      try {
        receipt = await chain.publicClient.waitForTransactionReceipt({
          hash: s.hash,
          confirmations: config.chain.confirmations,
          timeout: config.settlement.confirm_timeout_ms,
          pollingInterval: config.settlement.receipt_poll_ms,
        })
      } catch (err) {
        // Not mined in time or the RPC failed: the hash stays recorded, the next run looks it up.
        uptoSettlements.labels('receipt_error').inc(s.items.length)
        logger.warn('x402 upto settlement receipt not obtained; will look it up again', { tx: s.hash, err })
        return
      }
      await applyOutcomes(deps, s, receipt)
    }),
  )
}

/** Upto settlements already sent: final, lost, or still on their way. */
async function resolveSent(deps: JobDeps, freshMs: number): Promise<void> {
  const byHash = new Map<Hash, UptoSettlementCandidate[]>()
  const young = new Set<Hash>()
  for (const c of await listSentUptoSettlements(deps.sql)) {
    const hash = c.settlement_tx as Hash
    if (c.age_ms < freshMs) young.add(hash)
    byHash.set(hash, [...(byHash.get(hash) ?? []), c])
  }
  for (const [hash, items] of byHash) {
    // A failed look-up throws (the run ends, the next one asks again): unknown is not "lost".
    const receipt = await nullIfNotFound(deps.chain.publicClient.getTransactionReceipt({ hash }))
    if (receipt) {
      await applyOutcomes(deps, { items, hash }, receipt)
      continue
    }
    if (young.has(hash)) continue
    if (await nullIfNotFound(deps.chain.publicClient.getTransaction({ hash }))) continue
    // Never mined and unknown to the node: an unspent permit is signed again; a spent one was spent
    // elsewhere (the payer invalidated or used its nonce), and only our own log would have meant money.
    for (const c of items) {
      if (await nonceUsed(deps, c)) await fail(deps, c, hash, 'reverted')
      else {
        uptoSettlements.labels('lost').inc()
        await forgetUptoSettlementTx(deps.sql, { proofKey: c.proof_key, hash })
      }
    }
  }
}

/**
 * Books each permit's outcome: settled for what the chain's log says moved; failed for good (nothing moved,
 * the permit is spent or refused); unattempted ones forgotten, to be signed again.
 */
async function applyOutcomes(
  deps: JobDeps,
  s: Pick<SignedUpto, 'items' | 'hash'>,
  receipt: TransactionReceipt,
): Promise<void> {
  const outcomes: UptoOutcome[] = uptoSettlementOutcomes(receipt, {
    items: s.items.map((c) => ({ permit: c.authorization_payload, amount: BigInt(c.charge_atomic) })),
  })
  const settled: Array<{ proofKey: string; settledAtomic: bigint; block: bigint }> = []
  for (const [i, c] of s.items.entries()) {
    const o = outcomes[i]!
    if (o.status === 'settled')
      settled.push({ proofKey: c.proof_key, settledAtomic: o.amount, block: receipt.blockNumber })
    else if (o.status === 'failed') await fail(deps, c, s.hash, 'reverted')
    else {
      uptoSettlements.labels('unattempted').inc()
      await forgetUptoSettlementTx(deps.sql, { proofKey: c.proof_key, hash: s.hash })
    }
  }
  const done = await settleUptoClaims(deps.sql, { settled })
  if (done.length > 0) uptoSettlements.labels('settled').inc(done.length)
}

async function forgetRest({ sql }: JobDeps, rest: SignedUpto[]): Promise<void> {
  for (const s of rest)
    for (const c of s.items) await forgetUptoSettlementTx(sql, { proofKey: c.proof_key, hash: s.hash })
}

function nonceUsed({ chain }: JobDeps, c: UptoSettlementCandidate): Promise<boolean> {
  const p = c.authorization_payload
  return isPermit2NonceUsed(chain.publicClient, { owner: p.from, nonce: BigInt(p.nonce) })
}

async function fail(
  { sql, logger }: JobDeps,
  c: UptoSettlementCandidate,
  hash: Hash | null,
  reason: UptoSettlementFailure,
): Promise<void> {
  if (!(await failUptoSettlement(sql, { proofKey: c.proof_key, reason }))) return
  uptoSettlements.labels(reason).inc()
  logger.error('x402 upto settlement failed; the call stays unpaid', {
    proof_key: c.proof_key,
    tx: hash,
    reason,
  })
}
