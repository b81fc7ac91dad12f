// x402 `upto` settled after the call: each captured permit for its call's charge (a facilitator's for what
// its claim holds), soonest deadline first. Permits naming tollgate's UptoSettlementBatcher go
// settlement.per_transaction to a transaction; permits naming the treasury itself (a chain without the
// batcher) one each. A call charged nothing sends nothing. The pipeline that runs it is
// src/control-plane/jobs/settle-after-call.ts; what is upto's own is here.
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
import { sameAddress } from '../../chain/transfer.ts'
import { isPermit2NonceUsed } from '../../chain/upto-permit.ts'
import {
  signUptoSettlement,
  type UptoSettlementItem,
  uptoBatcherAddress,
  uptoSettlementOutcomes,
} from '../../chain/upto-settle.ts'
import { uptoSettlements } from '../../observability/metrics.ts'
import type { Resolution, Settler, SettlerDeps } from '../settler.ts'

export const UPTO_SETTLEMENT_JOB = 'x402-upto-settlement'

/** A permit settled for what the chain's log says moved, in the block that mined it. */
interface Moved {
  proofKey: string
  settledAtomic: bigint
  block: bigint
}

export function uptoSettler(deps: SettlerDeps): Settler<UptoSettlementCandidate, Moved> {
  const { sql, chain } = deps
  const treasury = chain.walletClient.account.address
  return {
    job: UPTO_SETTLEMENT_JOB,
    label: 'x402 upto',
    // Red while the soonest-expiring unsettled permit is close to its deadline: served calls are about to
    // become unpaid.
    readinessName: 'x402_upto_settlement',
    deadlineName: 'deadline',
    outcomes: uptoSettlements,
    // A permit whose nonce is spent elsewhere is not ours to book (the payer may spend or invalidate it
    // without paying us): a second transaction for a pooled one would make its money look lost.
    lostBehindGap: false,
    backlog: async () => {
      const b = await readUptoSettlementBacklog(sql)
      return { count: b.count, soonestS: b.soonestDeadlineS }
    },
    listDue: (q) => listDueUptoSettlements(sql, { limit: q.limit }),
    listSent: () => listSentUptoSettlements(sql),
    record: (txs) => recordUptoSettlementTx(sql, txs),
    forget: (q) => forgetUptoSettlementTx(sql, q),
    fail: (q) => failUptoSettlement(sql, { proofKey: q.proofKey, reason: q.reason as UptoSettlementFailure }),
    settle: async (done) => (await settleUptoClaims(sql, { settled: done })).length,
    triage: (due, nowS) => triage(deps, due, nowS),
    groups: async (send) => groupsOf(treasury, deps.settings.settlement.perTransaction, send),
    sign: (items, nonce, fees) =>
      signUptoSettlement(chain.walletClient.account, {
        chainId: chain.chainId,
        items: items.map(item),
        nonce,
        fees,
      }),
    // Settled for what the chain's log says moved; failed for good (nothing moved, the permit is spent or
    // refused); unattempted ones signed again.
    read: async (items, _hash, receipt) =>
      uptoSettlementOutcomes(receipt, { items: items.map(item) }).map((o, i): Resolution<Moved> => {
        if (o.status === 'settled')
          return {
            settled: { proofKey: items[i]!.proof_key, settledAtomic: o.amount, block: receipt.blockNumber },
          }
        return o.status === 'failed' ? { failed: 'reverted' } : 'unattempted'
      }),
    // Never mined: an unspent permit is signed again; a spent one was spent elsewhere (the payer invalidated
    // or used its nonce), and only our own log would have meant money.
    lost: (items) =>
      Promise.all(
        items.map(async (c): Promise<Resolution<Moved>> => {
          const p = c.authorization_payload
          const spent = await isPermit2NonceUsed(chain.publicClient, {
            owner: p.from,
            nonce: BigInt(p.nonce),
          })
          return spent ? { failed: 'reverted' } : 'unattempted'
        }),
      ),
  }
}

function item(c: UptoSettlementCandidate): UptoSettlementItem {
  return { permit: c.authorization_payload, amount: BigInt(c.charge_atomic) }
}

/**
 * Settles without a transaction what needs none (a zero charge), fails what can never be sent (deadline
 * past, charge above the signed maximum, a facilitator that is not ours), and sends the rest.
 */
async function triage(
  { sql, chain }: SettlerDeps,
  due: UptoSettlementCandidate[],
  nowS: bigint,
): Promise<{ send: UptoSettlementCandidate[]; failed: Array<[UptoSettlementCandidate, string]> }> {
  const treasury = chain.walletClient.account.address
  const facilitators = [treasury, uptoBatcherAddress(treasury)]
  const send: UptoSettlementCandidate[] = []
  const failed: Array<[UptoSettlementCandidate, UptoSettlementFailure]> = []
  const zero: string[] = []
  for (const c of due) {
    const p = c.authorization_payload
    const charge = BigInt(c.charge_atomic)
    if (charge === 0n) zero.push(c.proof_key)
    // Verification accepts only these; another (the treasury key changed since) can never be settled by us.
    else if (!facilitators.some((f) => sameAddress(f, p.facilitator))) failed.push([c, 'not_our_facilitator'])
    else if (charge > BigInt(p.amount)) failed.push([c, 'over_maximum'])
    // Permit2 refuses after the deadline; the settlement must also be mined before it.
    else if (BigInt(p.deadline) <= nowS) failed.push([c, 'expired'])
    else send.push(c)
  }
  if (zero.length > 0) {
    const done = await settleUptoClaims(sql, {
      settled: zero.map((proofKey) => ({ proofKey, settledAtomic: 0n })),
    })
    uptoSettlements.labels('zero_charge').inc(done.length)
  }
  return { send, failed }
}

/** Transactions to sign: the treasury's own permits one each, the batcher's per_transaction each. */
function groupsOf(
  treasury: string,
  per: number,
  send: UptoSettlementCandidate[],
): UptoSettlementCandidate[][] {
  const groups: UptoSettlementCandidate[][] = []
  const byFacilitator = new Map<string, UptoSettlementCandidate[]>()
  for (const c of send) {
    const f = c.authorization_payload.facilitator.toLowerCase()
    if (sameAddress(f, treasury)) groups.push([c])
    else byFacilitator.set(f, [...(byFacilitator.get(f) ?? []), c])
  }
  for (const items of byFacilitator.values())
    for (let i = 0; i < items.length; i += per) groups.push(items.slice(i, i + per))
  return groups
}
