// Attribution of plain transfers: each confirmed USDC transfer to the treasury that the watcher reports is
// matched by its exact amount to the payment that figure is reserved for (open, or closed within its hold),
// and applied through the books' applyPaymentProof, the same transition as a presented hash: its claim
// `tx:<hash>` makes a later presentation "already applied", never counted twice. A transfer no figure
// matches is recorded as an unmatched inflow. A transaction tollgate sent itself (its settlements: the money of
// calls and payments already booked through their own claims) is neither (src/chain/own-transactions.ts). A
// transfer an EIP-3009 authorization made is that authorization's money: never matched to a payment (its payer
// may have been served by it as x402 or MPP, then submitted it themselves, or anyone may have copied it from
// a pending settlement); left out when tollgate claimed the authorization (that claim settles on it), else
// recorded as unmatched, for the operator.
// Idempotent: every instance's watcher may report the same transfer, and a range is reported again after a
// failure.
import { applyPaymentProof, recordUnmatchedInflows } from '../books/payments.ts'
import { authorizationProofKey } from '../chain/authorization.ts'
import { isOwnMoney } from '../chain/own-transactions.ts'
import type { TreasuryTransfer, UsedAuthorization } from '../chain/transfer.ts'
import type { PaymentView } from '../db/payment-presenter.ts'
import { findPaymentsByFigure } from '../db/payments.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'

export interface AttributionDeps {
  sql: Sql
  view(): PaymentView
  ownerShareBps: number
  logger: Logger
  /** The addresses tollgate's own transactions come from, lowercase (src/chain/own-transactions.ts). */
  ownSenders(): ReadonlySet<string>
  /** The chain and token an authorization's claim key names (authorizationProofKey). */
  chainId: number
  usdc: string
}

export interface AttributionResult {
  applied: number
  alreadyClaimed: number
  unmatched: number
  /** tollgate's own settlements, left out. */
  own: number
  /** Transfers made by authorizations tollgate claimed, left out (their claims settle on them). */
  claimedAuthorizations: number
}

/** Matches one watcher range of transfers; throws on a database failure so the range is reported again. */
export async function attributeTransfers(
  deps: AttributionDeps,
  transfers: readonly TreasuryTransfer[],
): Promise<AttributionResult> {
  const result: AttributionResult = {
    applied: 0,
    alreadyClaimed: 0,
    unmatched: 0,
    own: 0,
    claimedAuthorizations: 0,
  }
  if (transfers.length === 0) return result
  const own = deps.ownSenders()
  const theirs = transfers.filter((t) => !isOwnMoney(t, own))
  result.own = transfers.length - theirs.length
  const plain = theirs.filter((t) => t.authorizations.length === 0)
  const unmatched = await unclaimedAuthorizationTransfers(
    deps,
    theirs.filter((t) => t.authorizations.length > 0),
  )
  result.claimedAuthorizations = theirs.length - plain.length - unmatched.length
  const figures = await findPaymentsByFigure(
    deps.sql,
    plain.map((t) => t.value),
  )
  for (const t of plain) {
    const paymentId = figures.get(t.value)
    if (!paymentId) {
      unmatched.push(t)
      continue
    }
    const hash = t.hash.toLowerCase()
    const outcome = await applyPaymentProof(deps.sql, {
      paymentId,
      proof: {
        proofKey: `tx:${hash}`,
        kind: 'tx',
        payer: t.from,
        valueAtomic: t.value,
        transaction: hash,
        proofAtMs: t.timestampMs,
      },
      ownerShareBps: deps.ownerShareBps,
      view: deps.view(),
    })
    if (outcome.kind === 'proof_already_used') result.alreadyClaimed++
    else result.applied++
    deps.logger.info('transfer matched to a payment by its amount', {
      payment_id: paymentId,
      transaction: hash,
      outcome: outcome.kind === 'refund_scheduled' ? `refund_scheduled:${outcome.reason}` : outcome.kind,
    })
  }
  result.unmatched = await recordUnmatchedInflows(
    deps.sql,
    unmatched.map((t) => ({ hash: t.hash, payer: t.from, valueAtomic: t.value, blockNumber: t.blockNumber })),
  )
  if (result.unmatched > 0) deps.logger.info('unmatched inflows recorded', { count: result.unmatched })
  return result
}

/** Of transfers authorizations made, those none of whose authorizations tollgate has a claim of. */
async function unclaimedAuthorizationTransfers(
  deps: AttributionDeps,
  transfers: TreasuryTransfer[],
): Promise<TreasuryTransfer[]> {
  if (transfers.length === 0) return []
  const keyOf = (a: UsedAuthorization) =>
    authorizationProofKey({ chainId: deps.chainId, token: deps.usdc, payer: a.authorizer, nonce: a.nonce })
  const keys = transfers.flatMap((t) => t.authorizations.map(keyOf))
  const claimed = new Set(
    (
      await deps.sql<{ proof_key: string }[]>`
      SELECT DISTINCT proof_key FROM claims WHERE proof_key = ANY(${keys}::text[])`
    ).map((r) => r.proof_key),
  )
  return transfers.filter((t) => !t.authorizations.some((a) => claimed.has(keyOf(a))))
}
