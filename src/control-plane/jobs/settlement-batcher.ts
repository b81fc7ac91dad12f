// Settles the x402 authorizations of captured calls on chain, on the leader. A run works the whole backlog
// down, soonest validBefore first, in batches of several transactions in flight on consecutive treasury
// nonces: signed locally, hashes recorded before broadcast (a restart looks them up instead of sending
// blind), broadcast in nonce order, then the receipts awaited together. Only the nonce assignment and the
// broadcasts hold the treasury lock shared with payouts; waiting for receipts never does.
import type { Hash } from 'viem'
import {
  failSettlement,
  forgetSettlementTx,
  listDueSettlements,
  listSentSettlements,
  settleAuthorizations as markSettled,
  readSettlementBacklog,
  recordSettlementTx,
  type SettlementCandidate,
  type SettlementFailure,
} from '../../books/settlement.ts'
import { readAuthorizationState } from '../../chain/authorization.ts'
import { nullIfNotFound } from '../../chain/not-found.ts'
import { broadcast, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { signSettlement } from '../../chain/settle.ts'
import { settlementBatchSize, settlements } from '../../observability/metrics.ts'
import { faultPoint } from './fault-point.ts'
import { type BackgroundModule, type JobDeps, type TreasuryLock, unlocked } from './runner.ts'

/** Gas for one transferWithAuthorization (measured ~60k on the test USDC; Circle's is similar) with margin. */
const SETTLEMENT_GAS = 150_000n

export function createSettlementJobs(
  deps: JobDeps,
  options: { treasuryLock?: TreasuryLock } = {},
): BackgroundModule {
  const { config } = deps
  return {
    jobs: [
      {
        name: 'x402-settlement',
        intervalMs: config.settlement.interval_ms,
        run: () => settleAuthorizations(deps, options.treasuryLock ?? unlocked),
      },
    ],
    readiness: [
      {
        // Red while the soonest-expiring unsettled authorization is closer to its validBefore than the margin:
        // served calls are about to become unpaid.
        name: 'x402_settlement',
        check: async () => {
          const b = await readSettlementBacklog(deps.sql)
          if (b.soonestValidBeforeS === null) return { ok: true, detail: 'no backlog' }
          const leftS = Math.round(b.soonestValidBeforeS - Date.now() / 1000)
          const detail = `${b.count} unsettled, soonest validBefore in ${leftS} s`
          return { ok: leftS > config.settlement.readiness_margin_s, detail }
        },
      },
    ],
  }
}

/** Settles everything due, batch after batch while a backlog remains. Returns how many were sent. */
export async function settleAuthorizations(deps: JobDeps, lock: TreasuryLock = unlocked): Promise<number> {
  await resolveSent(deps)
  let sent = 0
  for (;;) {
    const due = await listDueSettlements(deps.sql, { limit: deps.config.settlement.batch_max })
    if (due.length === 0) break
    const r = await settleBatch(deps, lock, due)
    sent += r.sent
    // A refused broadcast ends the run (later nonces cannot be mined before it); the next run retries.
    if (r.stopped || due.length < deps.config.settlement.batch_max) break
  }
  return sent
}

/** Settlements already sent: final, lost, or still on their way. */
async function resolveSent(deps: JobDeps): Promise<void> {
  const { sql, chain, logger } = deps
  for (const c of await listSentSettlements(sql)) {
    const hash = c.settlement_tx as Hash
    // A failed look-up throws (the run ends, the next one asks again): unknown is not "lost".
    const receipt = await nullIfNotFound(chain.publicClient.getTransactionReceipt({ hash }))
    if (receipt) {
      await outcome(deps, c, hash, receipt.status === 'success')
      continue
    }
    if (await isUsed(deps, c)) {
      await settled(deps, [c.proof_key])
      continue
    }
    // Still waiting in the node's pool: leave it, a second transaction for it would only revert.
    const pending = await nullIfNotFound(chain.publicClient.getTransaction({ hash }))
    if (pending) continue
    // Never mined, unknown to the node, authorization unused: forget the hash, it is signed again.
    logger.warn('x402 settlement lost before mining; signing again', { proof_key: c.proof_key, tx: hash })
    settlements.labels('lost').inc()
    await forgetSettlementTx(sql, { proofKey: c.proof_key, hash })
  }
}

async function settleBatch(
  deps: JobDeps,
  lock: TreasuryLock,
  due: SettlementCandidate[],
): Promise<{ sent: number; stopped: boolean }> {
  const { sql, chain, logger } = deps
  const nowS = BigInt(Math.floor(Date.now() / 1000))
  const live: SettlementCandidate[] = []
  for (const c of due) {
    if (BigInt(c.authorization_payload.validBefore) > nowS) {
      live.push(c)
      continue
    }
    // Served but can no longer be collected: nothing is booked for it (recorded, counted, logged).
    if (await failSettlement(sql, { proofKey: c.proof_key, reason: 'expired' })) {
      settlements.labels('expired').inc()
      logger.error('x402 authorization expired before settlement; the call stays unpaid', {
        proof_key: c.proof_key,
        valid_before: c.authorization_payload.validBefore,
      })
    }
  }
  if (live.length === 0) return { sent: 0, stopped: false }

  // The critical section: nonce assignment, signing, recording and broadcasting. No receipt is awaited here.
  const { inFlight, stopped } = await lock(async () => {
    const account = chain.walletClient.account
    const [fees, firstNonce] = await Promise.all([
      quoteFees(chain.publicClient),
      pendingNonce(chain.publicClient, account.address),
    ])
    const signed = await Promise.all(
      live.map(async (c, i) => ({
        c,
        ...(await signSettlement(account, {
          chainId: chain.chainId,
          usdc: chain.usdc.address,
          authorization: c.authorization_payload,
          nonce: firstNonce + i,
          gas: SETTLEMENT_GAS,
          fees,
        })),
      })),
    )
    const recorded = await recordSettlementTx(
      sql,
      signed.map((s) => ({ proofKey: s.c.proof_key, hash: s.hash })),
    )
    faultPoint('settlement:after_record')
    const out: Array<{ c: SettlementCandidate; hash: Hash }> = []
    for (const [i, s] of signed.entries()) {
      // A claim that moved since it was listed is skipped, and so is every later nonce (no gap is left).
      if (!recorded.has(s.c.proof_key)) {
        await forgetRest(deps, signed.slice(i))
        return { inFlight: out, stopped: true }
      }
      const r = await broadcast(chain.publicClient, s.rawTx)
      faultPoint('settlement:after_broadcast')
      if (r.ok || r.reason === 'already_known') {
        out.push({ c: s.c, hash: s.hash })
        continue
      }
      settlements.labels('broadcast_failed').inc()
      logger.error('x402 settlement broadcast failed; will retry', {
        proof_key: s.c.proof_key,
        tx: s.hash,
        reason: r.reason,
        message: r.message.slice(0, 160),
      })
      await forgetRest(deps, signed.slice(i))
      return { inFlight: out, stopped: true }
    }
    return { inFlight: out, stopped: false }
  })

  if (inFlight.length > 0) settlementBatchSize.observe(inFlight.length)
  await awaitOutcomes(deps, inFlight)
  return { sent: inFlight.length, stopped }
}

/**
 * Items handed to the returned function within one turn of the event loop are flushed together once
 * (setImmediate); each caller's promise settles with that flush.
 */
function coalesced<T>(flush: (items: T[]) => Promise<void>): (item: T) => Promise<void> {
  let items: T[] = []
  let next: Promise<void> | null = null
  return (item) => {
    items.push(item)
    next ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      const batch = items
      items = []
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
async function awaitOutcomes(deps: JobDeps, inFlight: Array<{ c: SettlementCandidate; hash: Hash }>) {
  const { chain, config, logger } = deps
  const settleSoon = coalesced((keys: string[]) => settled(deps, keys))
  await Promise.all(
    inFlight.map(async ({ c, hash }) => {
      let success: boolean
      try {
        const receipt = await chain.publicClient.waitForTransactionReceipt({
          hash,
          confirmations: config.chain.confirmations,
          timeout: config.settlement.confirm_timeout_ms,
          pollingInterval: config.settlement.receipt_poll_ms,
        })
        success = receipt.status === 'success'
      } catch (err) {
        // Not mined in time or the RPC failed: the hash stays recorded, the next run looks it up.
        settlements.labels('receipt_error').inc()
        logger.warn('x402 settlement receipt not obtained; will look it up again', {
          proof_key: c.proof_key,
          tx: hash,
          err,
        })
        return
      }
      // A revert is rare and asks the chain whether the authorization is used anyway.
      await (success ? settleSoon(c.proof_key) : outcome(deps, c, hash, false))
    }),
  )
}

/** Forgets the recorded hashes of signed transactions that were not broadcast. */
async function forgetRest(
  { sql }: JobDeps,
  rest: Array<{ c: SettlementCandidate; hash: Hash }>,
): Promise<void> {
  for (const s of rest) await forgetSettlementTx(sql, { proofKey: s.c.proof_key, hash: s.hash })
}

async function isUsed({ chain }: JobDeps, c: SettlementCandidate): Promise<boolean> {
  return readAuthorizationState(chain.publicClient, {
    usdc: chain.usdc.address,
    authorizer: c.authorization_payload.from,
    nonce: c.authorization_payload.nonce,
  })
}

/** A mined settlement. A revert whose authorization is used anyway (the payer or an earlier transaction of
 * ours took it) is still money arrived; a revert of an unused one fails the settlement. */
async function outcome(deps: JobDeps, c: SettlementCandidate, hash: Hash, success: boolean): Promise<void> {
  if (success || (await isUsed(deps, c))) return settled(deps, [c.proof_key])
  await fail(deps, c, hash, 'reverted')
}

async function settled({ sql }: JobDeps, proofKeys: string[]): Promise<void> {
  const done = await markSettled(sql, { proofKeys })
  if (done.length > 0) settlements.labels('settled').inc(done.length)
}

async function fail(
  { sql, logger }: JobDeps,
  c: SettlementCandidate,
  hash: Hash,
  reason: SettlementFailure,
): Promise<void> {
  if (!(await failSettlement(sql, { proofKey: c.proof_key, reason }))) return
  settlements.labels(reason).inc()
  logger.error('x402 settlement failed; the call stays unpaid', { proof_key: c.proof_key, tx: hash, reason })
}
