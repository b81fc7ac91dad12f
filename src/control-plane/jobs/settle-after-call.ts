// Settles on chain, on the leader, the payments of captured calls whose schemes collect after the call
// (x402 exact authorizations, x402 upto permits): one pipeline, each scheme's own part behind its Settler
// (src/schemes/settler.ts). A run works the whole backlog down, soonest deadline first, in steps of several
// transactions in flight on consecutive treasury nonces: signed locally, hashes recorded before broadcast (a
// restart looks them up instead of sending blind), broadcast in nonce order, then the receipts awaited
// together. Only the nonce assignment and the broadcasts hold the treasury lock shared with payouts; waiting
// for receipts never does.
import type { Hash, Hex, TransactionReceipt } from 'viem'
import { nullIfNotFound } from '../../chain/not-found.ts'
import { broadcast, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { registeredSettlers } from '../../schemes/index.ts'
import { type SchemeSettings, schemeSettings } from '../../schemes/settings.ts'
import type { Resolution, SettlementItem, Settler } from '../../schemes/settler.ts'
import { faultPoint } from './fault-point.ts'
import { type BackgroundModule, type JobDeps, type TreasuryLock, unlocked } from './runner.ts'

/** What one run of one scheme's settlement works with. */
interface Run {
  settler: Settler
  deps: JobDeps
  settings: SchemeSettings['settlement']
}

/** One settlement transaction: its payments, one or a batch, in the order the transaction carries them. */
interface SignedTx {
  items: SettlementItem[]
  rawTx: Hex
  hash: Hash
}

/** One job and one readiness check per scheme that settles after the call. */
export function createSettleAfterCallJobs(
  deps: JobDeps,
  options: { treasuryLock?: TreasuryLock } = {},
): BackgroundModule {
  const settings = schemeSettings(deps.config, deps.chain.devChain)
  const settlerDeps = { ...deps, settings }
  const runs: Run[] = registeredSettlers().map((factory) => ({
    settler: factory(settlerDeps),
    deps,
    settings: settings.settlement,
  }))
  return {
    jobs: runs.map((run) => ({
      name: run.settler.job,
      intervalMs: run.settings.intervalMs,
      run: () => settleDue(run, options.treasuryLock ?? unlocked),
    })),
    readiness: runs.map(({ settler, settings: s }) => ({
      // Red while the soonest deadline is closer than the margin: served calls are about to become unpaid.
      name: settler.readinessName,
      check: async () => {
        const b = await settler.backlog()
        if (b.soonestS === null) return { ok: true, detail: 'no backlog' }
        const leftS = Math.round(b.soonestS - Date.now() / 1000)
        const detail = `${b.count} unsettled, soonest ${settler.deadlineName} in ${leftS} s`
        return { ok: leftS > s.readinessMarginS, detail }
      },
    })),
  }
}

/** Settles everything due, step after step while a backlog remains. Returns how many payments were sent. */
export async function settleDue(run: Run, lock: TreasuryLock): Promise<number> {
  const { settler, settings } = run
  await resolveSent(run)
  let sent = 0
  for (;;) {
    const limit = settings.batchMax
    const due = await settler.listDue({ limit, capturedBeforeMs: settings.earlyGapMs })
    if (due.length === 0) break
    const r = await settleStep(run, lock, due)
    sent += r.sent
    // A refused broadcast ends the run (later nonces cannot be mined before it); the next run retries.
    if (r.stopped || due.length < limit) break
  }
  return sent
}

async function settleStep(
  run: Run,
  lock: TreasuryLock,
  due: SettlementItem[],
): Promise<{ sent: number; stopped: boolean }> {
  const { settler, deps } = run
  const { send, failed } = await settler.triage(due, BigInt(Math.floor(Date.now() / 1000)))
  for (const [c, reason] of failed) await fail(run, c, null, reason)
  if (send.length === 0) return { sent: 0, stopped: false }
  const groups = await settler.groups(send)

  // The critical section: nonce assignment, signing, recording and broadcasting. No receipt is awaited here.
  const { inFlight, stopped } = await lock(async () => {
    const { publicClient, walletClient } = deps.chain
    const [fees, firstNonce] = await Promise.all([
      quoteFees(publicClient),
      pendingNonce(publicClient, walletClient.account.address),
    ])
    const signed: SignedTx[] = await Promise.all(
      groups.map(async (items, i) => ({ items, ...(await settler.sign(items, firstNonce + i, fees)) })),
    )
    // Each payment's place in its transaction, as the transaction carries them: for its receipt.
    const recorded = await settler.record(
      signed.flatMap((s) =>
        s.items.map((c, index) => ({ proofKey: c.proof_key, hash: s.hash, index, count: s.items.length })),
      ),
    )
    faultPoint('settlement:after_record')
    return broadcastInOrder(run, signed, recorded)
  })

  const sent = inFlight.reduce((n, s) => n + s.items.length, 0)
  if (sent > 0) settler.stepSize?.observe(sent)
  await awaitOutcomes(run, inFlight)
  return { sent, stopped }
}

/**
 * Broadcasts in nonce order. A transaction with a claim that moved since it was listed is not sent, and
 * neither is any later nonce (no gap is left); a refused broadcast stops the same way.
 */
async function broadcastInOrder(
  run: Run,
  signed: SignedTx[],
  recorded: Set<string>,
): Promise<{ inFlight: SignedTx[]; stopped: boolean }> {
  const { settler, deps } = run
  const out: SignedTx[] = []
  for (const [i, s] of signed.entries()) {
    if (!s.items.every((c) => recorded.has(c.proof_key))) {
      await forgetRest(run, signed.slice(i))
      return { inFlight: out, stopped: true }
    }
    const r = await broadcast(deps.chain.publicClient, s.rawTx)
    faultPoint('settlement:after_broadcast')
    if (r.ok || r.reason === 'already_known') {
      out.push(s)
      continue
    }
    settler.outcomes.labels('broadcast_failed').inc(s.items.length)
    deps.logger.error(`${settler.label} settlement broadcast failed; will retry`, {
      proof_keys: s.items.map((c) => c.proof_key),
      tx: s.hash,
      reason: r.reason,
      message: r.message.slice(0, 160),
    })
    await forgetRest(run, signed.slice(i))
    return { inFlight: out, stopped: true }
  }
  return { inFlight: out, stopped: false }
}

/**
 * Items handed to the returned function within one turn of the event loop are flushed together once
 * (setImmediate); each caller's promise settles with that flush.
 */
function coalesced<T>(flush: (items: T[]) => Promise<void>): (items: T[]) => Promise<void> {
  let pending: T[] = []
  let next: Promise<void> | null = null
  return (items) => {
    pending.push(...items)
    next ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      const batch = pending
      pending = []
      next = null
      return flush(batch)
    })
    return next
  }
}

/**
 * Waits for the receipts of what was broadcast and books each outcome as soon as its receipt is in.
 * Receipts of one block arrive together (one batched JSON-RPC answer): their settlements share a commit.
 */
async function awaitOutcomes(run: Run, inFlight: SignedTx[]): Promise<void> {
  const { settler, deps, settings } = run
  const settleSoon = coalesced((done: unknown[]) => settled(run, done))
  await Promise.all(
    inFlight.map(async (s) => {
      let receipt: TransactionReceipt
      try {
        receipt = await deps.chain.publicClient.waitForTransactionReceipt({
          hash: s.hash,
          confirmations: settings.confirmations,
          timeout: settings.confirmTimeoutMs,
          pollingInterval: settings.receiptPollMs,
        })
      } catch (err) {
        // Not mined in time or the RPC failed: the hash stays recorded, the next run looks it up.
        settler.outcomes.labels('receipt_error').inc(s.items.length)
        deps.logger.warn(`${settler.label} settlement receipt not obtained; will look it up again`, {
          tx: s.hash,
          err,
        })
        return
      }
      const outcomes = await settler.read(s.items, s.hash, receipt)
      await settleSoon(await apply(run, s, outcomes, 'unattempted'))
    }),
  )
}

/**
 * A transaction pooled this long behind a gap in its sender's nonces is taken as lost. A live settler fills
 * its own gaps within seconds (schemes/exact/nonce-gaps.ts); this is for one whose process is gone and whose
 * slot nobody took again. Well inside an authorization's validity, well past any queue of a full chain.
 */
const QUEUED_BEHIND_GAP_MS = 60_000

/** Settlements already sent, grouped by transaction: final, lost, or still on their way. */
async function resolveSent(run: Run): Promise<void> {
  const { settler, deps, settings } = run
  const { publicClient } = deps.chain
  const byHash = new Map<Hash, SettlementItem[]>()
  // The settle-before-answer path records a hash with the capture, broadcasts right after and books the
  // receipt itself: its captures younger than earlyGapMs are not listed (exact), and a hash that young and
  // unknown to the node is not lost yet (its outcome is looked up on a later run).
  const young = new Set<Hash>()
  const old = new Set<Hash>()
  for (const c of await settler.listSent({ capturedBeforeMs: settings.earlyGapMs })) {
    const hash = c.settlement_tx as Hash
    if (c.age_ms < settings.earlyGapMs) young.add(hash)
    if (c.age_ms > QUEUED_BEHIND_GAP_MS) old.add(hash)
    byHash.set(hash, [...(byHash.get(hash) ?? []), c])
  }
  const minedNonces = new Map<Hex, number>()
  for (const [hash, items] of byHash) {
    // A failed look-up throws (the run ends, the next one asks again): unknown is not "lost".
    const receipt = await nullIfNotFound(publicClient.getTransactionReceipt({ hash }))
    if (receipt) {
      await settled(
        run,
        await apply(run, { items, hash }, await settler.read(items, hash, receipt), 'unattempted'),
      )
      continue
    }
    // Still waiting in the node's pool: leave it, a second transaction for it would only revert. Unless it
    // has waited long behind a hole in its sender's nonces (a settler that dropped out with a gap) and its
    // scheme books a payment spent by another transaction: then it is as good as lost, and signed again.
    if (young.has(hash)) continue
    const pending = await nullIfNotFound(publicClient.getTransaction({ hash }))
    const gapped = settler.lostBehindGap && old.has(hash)
    if (pending && !(gapped && (await behindGap(run, pending, minedNonces)))) continue
    await settled(run, await apply(run, { items, hash }, await settler.lost(items, hash), 'lost'))
  }
}

/** Whether a pooled transaction waits behind a nonce of its sender that nothing fills (mined nonce below it). */
async function behindGap(
  { deps }: Run,
  tx: { from: Hex; nonce: number },
  minedNonces: Map<Hex, number>,
): Promise<boolean> {
  let mined = minedNonces.get(tx.from)
  if (mined === undefined) {
    mined = await deps.chain.publicClient.getTransactionCount({ address: tx.from, blockTag: 'latest' })
    minedNonces.set(tx.from, mined)
  }
  return tx.nonce > mined
}

/**
 * Books what failed and forgets what is to be signed again (`again` names it in the metric: unattempted in a
 * mined transaction, or lost with an unmined one); returns what settled, for the books transition.
 */
async function apply(
  run: Run,
  s: Pick<SignedTx, 'items' | 'hash'>,
  outcomes: Array<Resolution<unknown>>,
  again: 'unattempted' | 'lost',
): Promise<unknown[]> {
  const { settler, deps } = run
  const done: unknown[] = []
  for (const [i, c] of s.items.entries()) {
    const o = outcomes[i]!
    if (o === 'unattempted') {
      if (again === 'lost')
        deps.logger.warn(`${settler.label} settlement lost before mining; signing again`, {
          proof_key: c.proof_key,
          tx: s.hash,
        })
      settler.outcomes.labels(again).inc()
      await settler.forget({ proofKey: c.proof_key, hash: s.hash })
    } else if ('failed' in o) await fail(run, c, s.hash, o.failed)
    else done.push(o.settled)
  }
  return done
}

/** Forgets the recorded hashes of signed transactions that were not broadcast. */
async function forgetRest({ settler }: Run, rest: SignedTx[]): Promise<void> {
  for (const s of rest) {
    for (const c of s.items) await settler.forget({ proofKey: c.proof_key, hash: s.hash })
  }
}

async function settled({ settler }: Run, done: unknown[]): Promise<void> {
  if (done.length === 0) return
  const marked = await settler.settle(done)
  if (marked > 0) settler.outcomes.labels('settled').inc(marked)
}

/** Served but can no longer be collected: nothing is booked for it (recorded, counted, logged). */
async function fail({ settler, deps }: Run, c: SettlementItem, hash: Hash | null, reason: string) {
  if (!(await settler.fail({ proofKey: c.proof_key, reason }))) return
  settler.outcomes.labels(reason).inc()
  deps.logger.error(`${settler.label} settlement failed; the call stays unpaid`, {
    proof_key: c.proof_key,
    tx: hash,
    reason,
  })
}
