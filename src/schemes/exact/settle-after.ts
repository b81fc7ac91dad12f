// x402 `exact` settled after the call: captured authorizations (and checkout and facilitator ones, which take
// the same road) signed by the treasury, settlement.per_transaction to a transaction through the
// AuthorizationBatcher (or one each, where the chain lacks it), soonest validBefore first. The pipeline that
// runs it is src/control-plane/jobs/settle-after-call.ts; what is exact's own is here.
import type { Hash, TransactionReceipt } from 'viem'
import {
  failSettlement,
  forgetSettlementTx,
  listDueSettlements,
  listSentSettlements,
  readSettlementBacklog,
  recordSettlementTx,
  type SettlementCandidate,
  type SettlementFailure,
  settleAuthorizations,
} from '../../books/settlement.ts'
import { readAuthorizationState } from '../../chain/authorization.ts'
import { findAuthorizationUse } from '../../chain/authorization-use.ts'
import {
  AUTHORIZATION_BATCHER_ADDRESS,
  hasAuthorizationBatcher,
  settlementOutcomes,
  signAuthorizations,
} from '../../chain/settle-batch.ts'
import { settlementBatchSize, settlements } from '../../observability/metrics.ts'
import type { Resolution, Settler, SettlerDeps } from '../settler.ts'

/** How long a chain found without the AuthorizationBatcher is believed: `npm run deploy:batcher` is picked up. */
const BATCHER_RECHECK_MS = 10 * 60_000

/** How far back a used authorization's transaction is looked for, in log chunks. */
const USE_LOOKBACK_CHUNKS = 20

/**
 * A proof key to mark settled, and the block of the transaction that used it; or, used by another
 * transaction than the recorded one, that transaction (null: not found, the recorded hash stays).
 */
type Used =
  | { proofKey: string; block: bigint }
  | { proofKey: string; usedBy: { tx: string; block: bigint; index: number; count: number } | null }

export function exactSettler(deps: SettlerDeps): Settler<SettlementCandidate, Used> {
  const { sql, chain, settings } = deps
  const s = settings.settlement
  const perTransaction = perTransactionLookup(deps)
  return {
    job: 'x402-settlement',
    label: 'x402',
    // Red while the soonest-expiring unsettled authorization is close to its validBefore: served calls are
    // about to become unpaid.
    readinessName: 'x402_settlement',
    deadlineName: 'validBefore',
    outcomes: settlements,
    stepSize: settlementBatchSize,
    // An authorization used by any transaction is money in: the one that used it is found and booked.
    lostBehindGap: true,
    backlog: async () => {
      const b = await readSettlementBacklog(sql)
      return { count: b.count, soonestS: b.soonestValidBeforeS }
    },
    // Fresh captures of endpoints that settle before the answer are that path's while their answers may
    // still wait for them.
    listDue: (q) =>
      listDueSettlements(sql, {
        ...q,
        defaultSettlement: s.beforeAnswerByDefault ? 'before_answer' : 'after',
      }),
    // Young captures with a hash are the settle-before-answer path's while it awaits their receipts.
    listSent: (q) => listSentSettlements(sql, q),
    record: (txs) => recordSettlementTx(sql, txs),
    forget: (q) => forgetSettlementTx(sql, q),
    fail: (q) => failSettlement(sql, { proofKey: q.proofKey, reason: q.reason as SettlementFailure }),
    settle: (done) => settle(deps, done),
    // Served but can no longer be collected once its window closed: nothing is booked for it.
    triage: async (due, nowS) => ({
      send: due.filter((c) => BigInt(c.authorization_payload.validBefore) > nowS),
      failed: due
        .filter((c) => BigInt(c.authorization_payload.validBefore) <= nowS)
        .map((c): [SettlementCandidate, string] => [c, 'expired']),
    }),
    groups: async (send) => {
      const per = await perTransaction()
      const groups: SettlementCandidate[][] = []
      for (let i = 0; i < send.length; i += per) groups.push(send.slice(i, i + per))
      return groups
    },
    sign: (items, nonce, fees) =>
      signAuthorizations(chain.walletClient.account, {
        chainId: chain.chainId,
        usdc: chain.usdc.address,
        authorizations: items.map((c) => c.authorization_payload),
        nonce,
        fees,
      }),
    read: (items, hash, receipt) => read(deps, items, hash, receipt),
    // Never mined: what is used anyway (anyone may submit an authorization; the money arrived all the same)
    // is settled, the rest signed again.
    lost: (items) =>
      Promise.all(
        items.map(async (c): Promise<Resolution<Used>> => {
          if (await isUsed(deps, c)) return { settled: await usedElsewhere(deps, c) }
          return 'unattempted'
        }),
      ),
  }
}

/**
 * A mined transaction's outcome for each of its authorizations. Failed and unattempted ones ask the chain
 * whether they are used anyway (the payer or an earlier transaction of ours took it: money arrived);
 * otherwise a failed one fails and an unattempted one is signed again.
 */
async function read(
  deps: SettlerDeps,
  items: SettlementCandidate[],
  _hash: Hash,
  receipt: TransactionReceipt,
): Promise<Array<Resolution<Used>>> {
  const outcomes = settlementOutcomes(receipt, {
    usdc: deps.chain.usdc.address,
    authorizations: items.map((c) => c.authorization_payload),
  })
  const out: Array<Resolution<Used>> = []
  for (const [i, c] of items.entries()) {
    const o = outcomes[i]
    if (o === 'used') out.push({ settled: { proofKey: c.proof_key, block: receipt.blockNumber } })
    // Used, but not by this transaction (the payer, or an earlier one of ours): that one is named.
    else if (await isUsed(deps, c)) out.push({ settled: await usedElsewhere(deps, c) })
    else out.push(o === 'failed' ? { failed: 'reverted' } : 'unattempted')
  }
  return out
}

/**
 * How many authorizations one transaction carries: settlement.per_transaction when the chain holds this
 * build's AuthorizationBatcher, else 1. Found once, it is kept; missing, it is asked again every
 * BATCHER_RECHECK_MS (a failed look-up throws: the run ends and the next one asks again).
 */
function perTransactionLookup({ settings, chain, logger }: SettlerDeps): () => Promise<number> {
  const wanted = settings.settlement.perTransaction
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
        { address: AUTHORIZATION_BATCHER_ADDRESS, deploy: 'npm run deploy:batcher' },
      )
    }
    missingSince = Date.now()
    return 1
  }
}

function isUsed({ chain }: SettlerDeps, c: SettlementCandidate): Promise<boolean> {
  return readAuthorizationState(chain.publicClient, {
    usdc: chain.usdc.address,
    authorizer: c.authorization_payload.from,
    nonce: c.authorization_payload.nonce,
  })
}

async function usedElsewhere(
  { chain, settings, logger }: SettlerDeps,
  c: SettlementCandidate,
): Promise<Used> {
  const use = await findAuthorizationUse(chain.publicClient, {
    usdc: chain.usdc.address,
    authorizer: c.authorization_payload.from,
    nonce: c.authorization_payload.nonce,
    chunk: settings.settlement.logChunkBlocks,
    maxChunks: USE_LOOKBACK_CHUNKS,
  })
  if (use === null) {
    logger.warn('x402 authorization used on chain, its transaction not found; the recorded hash stays', {
      proof_key: c.proof_key,
      tx: c.settlement_tx,
    })
  }
  const usedBy = use && { tx: use.hash, block: use.blockNumber, index: use.index, count: use.count }
  return { proofKey: c.proof_key, usedBy }
}

function settle(deps: SettlerDeps, done: Used[]): Promise<number> {
  const blocks = new Map<string, bigint>()
  const usedBy = new Map<string, { tx: string; block: bigint; index: number; count: number }>()
  for (const d of done) {
    if ('block' in d) blocks.set(d.proofKey, d.block)
    else if (d.usedBy) usedBy.set(d.proofKey, d.usedBy)
  }
  const { chain } = deps
  // A checkout's authorization is applied to its payment in the same transaction (src/books/payments.ts).
  const payments = {
    ownerShareBps: deps.settings.ownerShareBps,
    view: {
      publicUrl: deps.publicUrl(),
      network: chain.network,
      chainId: chain.chainId,
      treasury: chain.treasury,
      usdcAddress: chain.usdc.address,
    },
  }
  const proofKeys = done.map((d) => d.proofKey)
  return settleAuthorizations(deps.sql, { proofKeys, blocks, usedBy, payments }).then((m) => m.length)
}
