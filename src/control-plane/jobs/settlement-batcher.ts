// Settles the x402 authorizations of captured calls on chain, on the leader. A run works the whole backlog
// down, soonest validBefore first, in steps of several transactions in flight on consecutive treasury
// nonces, each carrying settlement.per_transaction authorizations through the AuthorizationBatcher (or one,
// when the chain lacks it): signed locally, hashes recorded before broadcast (a restart looks them up instead
// of sending blind), broadcast in nonce order, then the receipts awaited together. Only the nonce assignment
// and the broadcasts hold the treasury lock shared with payouts; waiting for receipts never does.
import type { Hash, Hex, TransactionReceipt } from 'viem'
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
import { type AuthorizationUse, findAuthorizationUse } from '../../chain/authorization-use.ts'
import { nullIfNotFound } from '../../chain/not-found.ts'
import type { FeeQuote } from '../../chain/payouts.ts'
import { broadcast, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { signSettlement } from '../../chain/settle.ts'
import {
  AUTHORIZATION_BATCHER_ADDRESS,
  hasAuthorizationBatcher,
  settlementOutcomes,
  signSettlementBatch,
} from '../../chain/settle-batch.ts'
import { settleBeforeAnswerUnavailable } from '../../config/settle-before-answer.ts'
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
  const perTransaction = perTransactionLookup(deps)
  return {
    jobs: [
      {
        name: 'x402-settlement',
        intervalMs: config.settlement.interval_ms,
        run: () => settleAuthorizations(deps, options.treasuryLock ?? unlocked, perTransaction),
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

/** How long a chain found without the AuthorizationBatcher is believed: `npm run deploy:batcher` is picked up. */
const BATCHER_RECHECK_MS = 10 * 60_000

/**
 * How many authorizations one transaction carries: settlement.per_transaction when the chain holds this
 * build's AuthorizationBatcher, else 1. Found once, it is kept; missing, it is asked again every
 * BATCHER_RECHECK_MS (a failed look-up throws: the run ends and the next one asks again).
 */
function perTransactionLookup({ config, chain, logger }: JobDeps): () => Promise<number> {
  const wanted = config.settlement.per_transaction
  let found = false
  let missingSince: number | null = null
  return async () => {
    if (wanted === 1 || found) return wanted
    if (missingSince !== null && Date.now() - missingSince < BATCHER_RECHECK_MS) return 1
    found = await hasAuthorizationBatcher(chain.publicClient)
    if (found) {
      if (missingSince !== null)
        logger.info('AuthorizationBatcher found; settling in batches', {
          address: AUTHORIZATION_BATCHER_ADDRESS,
        })
      missingSince = null
      return wanted
    }
    if (missingSince === null) {
      logger.warn(
        'no AuthorizationBatcher on this chain; x402 settlement sends one transaction per authorization',
        {
          address: AUTHORIZATION_BATCHER_ADDRESS,
          deploy: 'npm run deploy:batcher',
        },
      )
    }
    missingSince = Date.now()
    return 1
  }
}

/** Settles everything due, step after step while a backlog remains. Returns how many authorizations were sent. */
export async function settleAuthorizations(
  deps: JobDeps,
  lock: TreasuryLock,
  perTransaction: () => Promise<number>,
): Promise<number> {
  // Fresh captures of endpoints that settle before the answer are that path's while their answers may still
  // wait for them (where the path exists: a secret to derive settler slots from).
  const early = deps.config.settlement.before_answer
  const capturedBeforeMs =
    settleBeforeAnswerUnavailable(deps.config) === null ? early.window_ms + 2 * early.wait_ms : 0
  const defaultSettlement = early.enabled ? 'before_answer' : 'after'
  await resolveSent(deps, capturedBeforeMs)
  const per = await perTransaction()
  let sent = 0
  for (;;) {
    const due = await listDueSettlements(deps.sql, {
      limit: deps.config.settlement.batch_max,
      capturedBeforeMs,
      defaultSettlement,
    })
    if (due.length === 0) break
    const r = await settleStep(deps, lock, due, per)
    sent += r.sent
    // A refused broadcast ends the run (later nonces cannot be mined before it); the next run retries.
    if (r.stopped || due.length < deps.config.settlement.batch_max) break
  }
  return sent
}

/** One settlement transaction: its authorizations, one or a batch, in the order the transaction carries them. */
interface SignedSettlement {
  items: SettlementCandidate[]
  rawTx: Hex
  hash: Hash
}

/**
 * A transaction pooled this long behind a gap in its sender's nonces is taken as lost. A live settler fills
 * its own gaps within seconds (schemes/exact/nonce-gaps.ts); this is for one whose process is gone and whose
 * slot nobody took again. Well inside an authorization's validity, well past any queue of a full chain.
 */
const QUEUED_BEHIND_GAP_MS = 60_000

/** Settlements already sent, grouped by transaction: final, lost, or still on their way. */
async function resolveSent(deps: JobDeps, freshMs: number): Promise<void> {
  const { sql, chain, logger } = deps
  const byHash = new Map<Hash, SettlementCandidate[]>()
  // The settle-before-answer path records a hash with the capture and broadcasts right after: a hash that
  // young and unknown to the node is not lost yet (its outcome is looked up on a later run).
  const young = new Set<Hash>()
  const old = new Set<Hash>()
  for (const c of await listSentSettlements(sql)) {
    if (c.age_ms < freshMs) young.add(c.settlement_tx as Hash)
    if (c.age_ms > QUEUED_BEHIND_GAP_MS) old.add(c.settlement_tx as Hash)
    const hash = c.settlement_tx as Hash
    const items = byHash.get(hash)
    if (items) items.push(c)
    else byHash.set(hash, [c])
  }
  const minedNonces = new Map<Hex, number>()
  for (const [hash, items] of byHash) {
    // A failed look-up throws (the run ends, the next one asks again): unknown is not "lost".
    const receipt = await nullIfNotFound(chain.publicClient.getTransactionReceipt({ hash }))
    if (receipt) {
      await settled(deps, await applyOutcomes(deps, { items, hash }, receipt))
      continue
    }
    // Still waiting in the node's pool: leave it, a second transaction for it would only revert. Unless it
    // has waited long behind a hole in its sender's nonces (a settler that dropped out with a gap): then it is
    // as good as lost, and signed again from here (if it is mined one day, what this settles first is used,
    // and the token refuses an authorization twice).
    if (young.has(hash)) continue
    const pending = await nullIfNotFound(chain.publicClient.getTransaction({ hash }))
    if (pending && !(old.has(hash) && (await behindGap(deps, pending, minedNonces)))) continue
    // Never mined and unknown to the node: what is used anyway (anyone may submit an authorization; the
    // money arrived all the same) is settled, the rest forgotten and signed again.
    const used: Settled[] = []
    for (const c of items) {
      if (await isUsed(deps, c)) {
        used.push(await usedElsewhere(deps, c))
        continue
      }
      logger.warn('x402 settlement lost before mining; signing again', { proof_key: c.proof_key, tx: hash })
      settlements.labels('lost').inc()
      await forgetSettlementTx(sql, { proofKey: c.proof_key, hash })
    }
    await settled(deps, used)
  }
}

/** Whether a pooled transaction waits behind a nonce of its sender that nothing fills (mined nonce below it). */
async function behindGap(
  { chain }: JobDeps,
  tx: { from: Hex; nonce: number },
  minedNonces: Map<Hex, number>,
): Promise<boolean> {
  let mined = minedNonces.get(tx.from)
  if (mined === undefined) {
    mined = await chain.publicClient.getTransactionCount({ address: tx.from, blockTag: 'latest' })
    minedNonces.set(tx.from, mined)
  }
  return tx.nonce > mined
}

/** Authorizations still inside their window; the others are failed as expired (served, never to be paid). */
async function dropExpired(deps: JobDeps, due: SettlementCandidate[]): Promise<SettlementCandidate[]> {
  const { sql, logger } = deps
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
  return live
}

async function settleStep(
  deps: JobDeps,
  lock: TreasuryLock,
  due: SettlementCandidate[],
  perTransaction: number,
): Promise<{ sent: number; stopped: boolean }> {
  const live = await dropExpired(deps, due)
  if (live.length === 0) return { sent: 0, stopped: false }
  const groups: SettlementCandidate[][] = []
  for (let i = 0; i < live.length; i += perTransaction) groups.push(live.slice(i, i + perTransaction))

  // The critical section: nonce assignment, signing, recording and broadcasting. No receipt is awaited here.
  const { inFlight, stopped } = await lock(async () => {
    const [fees, firstNonce] = await Promise.all([
      quoteFees(deps.chain.publicClient),
      pendingNonce(deps.chain.publicClient, deps.chain.walletClient.account.address),
    ])
    const signed = await Promise.all(
      groups.map(async (items, i) => ({ items, ...(await sign(deps, items, firstNonce + i, fees)) })),
    )
    const recorded = await recordSettlementTx(
      deps.sql,
      signed.flatMap((s) =>
        s.items.map((c, index) => ({ proofKey: c.proof_key, hash: s.hash, index, count: s.items.length })),
      ),
    )
    faultPoint('settlement:after_record')
    return broadcastInOrder(deps, signed, recorded)
  })

  const sent = inFlight.reduce((n, s) => n + s.items.length, 0)
  if (sent > 0) settlementBatchSize.observe(sent)
  await awaitOutcomes(deps, inFlight)
  return { sent, stopped }
}

/** One authorization: transferWithAuthorization itself. Several: one call of the AuthorizationBatcher. */
function sign(
  { chain }: JobDeps,
  items: SettlementCandidate[],
  nonce: number,
  fees: FeeQuote,
): Promise<{ rawTx: Hex; hash: Hash }> {
  const account = chain.walletClient.account
  const common = { chainId: chain.chainId, usdc: chain.usdc.address, nonce, fees }
  if (items.length === 1) {
    return signSettlement(account, {
      ...common,
      authorization: items[0]!.authorization_payload,
      gas: SETTLEMENT_GAS,
    })
  }
  return signSettlementBatch(account, {
    ...common,
    authorizations: items.map((c) => c.authorization_payload),
  })
}

/**
 * Broadcasts in nonce order. A transaction with a claim that moved since it was listed is not sent, and
 * neither is any later nonce (no gap is left); a refused broadcast stops the same way.
 */
async function broadcastInOrder(
  deps: JobDeps,
  signed: SignedSettlement[],
  recorded: Set<string>,
): Promise<{ inFlight: SignedSettlement[]; stopped: boolean }> {
  const out: SignedSettlement[] = []
  for (const [i, s] of signed.entries()) {
    if (!s.items.every((c) => recorded.has(c.proof_key))) {
      await forgetRest(deps, signed.slice(i))
      return { inFlight: out, stopped: true }
    }
    const r = await broadcast(deps.chain.publicClient, s.rawTx)
    faultPoint('settlement:after_broadcast')
    if (r.ok || r.reason === 'already_known') {
      out.push(s)
      continue
    }
    settlements.labels('broadcast_failed').inc(s.items.length)
    deps.logger.error('x402 settlement broadcast failed; will retry', {
      proof_keys: s.items.map((c) => c.proof_key),
      tx: s.hash,
      reason: r.reason,
      message: r.message.slice(0, 160),
    })
    await forgetRest(deps, signed.slice(i))
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
async function awaitOutcomes(deps: JobDeps, inFlight: SignedSettlement[]) {
  const { chain, config, logger } = deps
  const settleSoon = coalesced((done: Settled[]) => settled(deps, done))
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
        settlements.labels('receipt_error').inc(s.items.length)
        logger.warn('x402 settlement receipt not obtained; will look it up again', { tx: s.hash, err })
        return
      }
      await settleSoon(await applyOutcomes(deps, s, receipt))
    }),
  )
}

/**
 * Reads a mined transaction's outcome for each of its authorizations. Failed and unattempted ones ask the
 * chain whether they are used anyway (the payer or an earlier transaction of ours took it: money arrived);
 * otherwise a failed one fails its settlement and an unattempted one is forgotten, to be signed again.
 * Returns the proof keys to mark settled, with the block when this transaction used them.
 */
async function applyOutcomes(
  deps: JobDeps,
  s: Pick<SignedSettlement, 'items' | 'hash'>,
  receipt: TransactionReceipt,
): Promise<Settled[]> {
  const outcomes = settlementOutcomes(receipt, {
    usdc: deps.chain.usdc.address,
    authorizations: s.items.map((c) => c.authorization_payload),
  })
  const used: Settled[] = []
  for (const [i, c] of s.items.entries()) {
    const o = outcomes[i]
    if (o === 'used') {
      used.push([c.proof_key, receipt.blockNumber])
    } else if (await isUsed(deps, c)) {
      // Used, but not by this transaction (the payer, or an earlier one of ours): that one is named.
      used.push(await usedElsewhere(deps, c))
    } else if (o === 'failed') {
      await fail(deps, c, s.hash, 'reverted')
    } else {
      settlements.labels('unattempted').inc()
      await forgetSettlementTx(deps.sql, { proofKey: c.proof_key, hash: s.hash })
    }
  }
  return used
}

/** Forgets the recorded hashes of signed transactions that were not broadcast. */
async function forgetRest({ sql }: JobDeps, rest: SignedSettlement[]): Promise<void> {
  for (const s of rest) {
    for (const c of s.items) await forgetSettlementTx(sql, { proofKey: c.proof_key, hash: s.hash })
  }
}

async function isUsed({ chain }: JobDeps, c: SettlementCandidate): Promise<boolean> {
  return readAuthorizationState(chain.publicClient, {
    usdc: chain.usdc.address,
    authorizer: c.authorization_payload.from,
    nonce: c.authorization_payload.nonce,
  })
}

/**
 * A proof key to mark settled, and the block of the transaction that used it; or, used by another
 * transaction than the recorded one, that transaction (null: not found, the recorded hash stays).
 */
type Settled = [proofKey: string, block: bigint] | [proofKey: string, null, AuthorizationUse | null]

/** How far back a used authorization's transaction is looked for, in reconcile's log chunks. */
const USE_LOOKBACK_CHUNKS = 20

async function usedElsewhere({ chain, config, logger }: JobDeps, c: SettlementCandidate): Promise<Settled> {
  const use = await findAuthorizationUse(chain.publicClient, {
    usdc: chain.usdc.address,
    authorizer: c.authorization_payload.from,
    nonce: c.authorization_payload.nonce,
    chunk: BigInt(config.payouts.reconcile_block_chunk),
    maxChunks: USE_LOOKBACK_CHUNKS,
  })
  if (use === null) {
    logger.warn('x402 authorization used on chain, its transaction not found; the recorded hash stays', {
      proof_key: c.proof_key,
      tx: c.settlement_tx,
    })
  }
  return [c.proof_key, null, use]
}

async function settled(deps: JobDeps, done: Settled[]): Promise<void> {
  if (done.length === 0) return
  const proofKeys = done.map(([k]) => k)
  const blocks = new Map<string, bigint>()
  const usedBy = new Map<string, { tx: string; block: bigint; index: number; count: number }>()
  for (const d of done) {
    if (d[1] !== null) blocks.set(d[0], d[1])
    else if (d[2])
      usedBy.set(d[0], { tx: d[2].hash, block: d[2].blockNumber, index: d[2].index, count: d[2].count })
  }
  const { sql, config, chain } = deps
  // A checkout's authorization is applied to its payment in the same transaction (src/books/payments.ts).
  const payments = {
    ownerShareBps: config.fees.owner_share_bps,
    view: {
      publicUrl: deps.publicUrl(),
      network: chain.network,
      chainId: chain.chainId,
      treasury: chain.treasury,
      usdcAddress: chain.usdc.address,
    },
  }
  const marked = await markSettled(sql, { proofKeys, blocks, usedBy, payments })
  if (marked.length > 0) settlements.labels('settled').inc(marked.length)
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
