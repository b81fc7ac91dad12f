// GET /payouts, /payouts/:id: the account's payouts (owner shares and refunds of its calls) with their
// on-chain transactions; and the balance view GET /account shows.
import * as v from 'valibot'
import { type AccountBalance, accountBalance } from '../../db/ledger.ts'
import {
  type AccountPayoutRow,
  findAccountPayout,
  listAccountPayouts,
  type PayoutStatus,
  payoutObject,
} from '../../db/payouts.ts'
import type { Sql, Tx } from '../../db/sql.ts'
import { ApiError } from '../../errors.ts'
import { toDollars } from '../../money.ts'
import { Address, Atomic, Dollars, listOf, NullableTimestamp, Timestamp, TxHash } from '../api-schemas.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'

const STATUSES: readonly PayoutStatus[] = ['pending', 'submitted', 'confirmed', 'failed']

const AmountPair = v.strictObject({ amount: Dollars, amount_atomic: Atomic })

export const PayoutObject = v.strictObject({
  id: v.string(),
  object: v.literal('payout'),
  status: v.picklist(['pending', 'submitted', 'confirmed', 'failed']),
  kind: v.picklist(['payout', 'refund', 'mixed']),
  wallet: Address,
  amount: Dollars,
  amount_atomic: Atomic,
  account_amount_atomic: v.optional(
    v.pipe(Atomic, v.description("this account's part of a payout to a wallet several accounts share")),
  ),
  currency: v.literal('USDC'),
  transaction: v.nullable(TxHash),
  nonce: v.number(),
  block_number: v.nullable(v.number()),
  entries_count: v.pipe(
    v.number(),
    v.description(
      'ledger entries the payout pays: an owner share and a fee per account per capture batch (not per call), a refund each',
    ),
  ),
  attempts: v.number(),
  failure_reason: v.nullable(v.string()),
  created_at: Timestamp,
  submitted_at: NullableTimestamp,
  confirmed_at: NullableTimestamp,
  failed_at: NullableTimestamp,
  next_attempt_at: NullableTimestamp,
})

export const BalanceObject = v.strictObject({
  currency: v.literal('USDC'),
  captured: AmountPair,
  owner_share: AmountPair,
  fees: AmountPair,
  paid_out: AmountPair,
  pending: AmountPair,
  in_flight: AmountPair,
  refunded: AmountPair,
  refunds_pending: AmountPair,
})

export function presentPayout(p: AccountPayoutRow) {
  return payoutObject(p, { amount_atomic: p.account_amount_atomic })
}

/** `balance` of GET /account: dollars and base units for each total. */
export function presentBalance(b: AccountBalance): v.InferOutput<typeof BalanceObject> {
  const pair = (atomic: bigint) => ({ amount: toDollars(atomic), amount_atomic: atomic.toString() })
  return {
    currency: 'USDC',
    captured: pair(b.captured_atomic),
    owner_share: pair(b.owner_share_atomic),
    fees: pair(b.fees_atomic),
    paid_out: pair(b.paid_out_atomic),
    pending: pair(b.pending_atomic),
    in_flight: pair(b.in_flight_atomic),
    refunded: pair(b.refunded_atomic),
    refunds_pending: pair(b.refunds_pending_atomic),
  }
}

export async function accountBalanceView(db: Sql | Tx, accountId: string) {
  return presentBalance(await accountBalance(db, accountId))
}

/**
 * The balance as of now, read at every call: no cache. It was kept 2 s per process, so a refund booked in
 * one process (or instance) left GET /account showing the old `pending` for up to 2 s everywhere, while the
 * refunds doc says it drops at once. A read sums at most 8 slot rows through the primary key (migration
 * 0011), as cheap as any other authenticated read; `as_of` is the time of the read.
 */
export async function currentAccountBalance(db: Sql | Tx, accountId: string) {
  return { ...(await accountBalanceView(db, accountId)), as_of: new Date().toISOString() }
}

export const payoutRoutes: Route[] = [
  {
    method: 'GET',
    path: '/payouts',
    auth: true,
    doc: {
      summary: "The account's payouts, newest first",
      list: true,
      query: { status: v.optional(v.picklist(STATUSES)) },
      response: { status: 200, schema: listOf(PayoutObject) },
    },
    async handler({ query, account, db }) {
      const page = readPage(query)
      const status = query.get('status')
      if (status !== null && !STATUSES.includes(status as PayoutStatus)) {
        throw new ApiError('invalid_parameter', `status: must be one of ${STATUSES.join(', ')}`, 'status')
      }
      const rows = await listAccountPayouts(db, {
        accountId: account.id,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
        status: status as PayoutStatus | null,
      })
      return { status: 200, body: listResponse(rows, page, presentPayout) }
    },
  },
  {
    method: 'GET',
    path: '/payouts/:id',
    auth: true,
    doc: { summary: 'One payout', response: { status: 200, schema: PayoutObject } },
    async handler({ params, account, db }) {
      const row = await findAccountPayout(db, account.id, params.id!)
      // Another account's payout is indistinguishable from a missing one.
      if (!row) throw new ApiError('not_found', `no payout ${params.id}`, 'id')
      return { status: 200, body: presentPayout(row) }
    },
  },
]
