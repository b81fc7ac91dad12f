// /refunds: a merchant gives back all or part of a paid payment, metered call, or payment it settled through
// the facilitator to the treasury; the payer gets it in the next payout batch (src/books/refunds.ts holds
// the rules and the money statements).
import * as v from 'valibot'
import { createRefund, type RefundTarget } from '../../books/refunds.ts'
import { findRefund, listRefunds, presentRefund, type RefundStatus } from '../../db/refunds.ts'
import { ApiError } from '../../errors.ts'
import { newId } from '../../ids.ts'
import { parseDollars, toDollars } from '../../money.ts'
import { Address, Atomic, Dollars, listOf, NullableTimestamp, Timestamp, TxHash } from '../api-schemas.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'
import { parseBody } from '../validation.ts'

const STATUSES: readonly RefundStatus[] = ['pending', 'paid', 'failed']
const REFUND_ID = /^re_[0-9A-Za-z]{1,64}$/
const PAYMENT_ID = /^pay_[0-9A-Za-z]{1,64}$/
const CALL_ID = /^call_[0-9A-Za-z]{1,64}$/
const SETTLEMENT_ID = /^fst_[0-9A-Za-z]{1,64}$/
/** The body's and the list's names of a refund's source, one of which a refund names. */
const SOURCES = ['payment_id', 'call_id', 'settlement_id'] as const

const CreateBody = v.strictObject({
  payment_id: v.optional(v.pipe(v.string('must be a string'), v.regex(PAYMENT_ID, 'must be a payment id'))),
  call_id: v.optional(v.pipe(v.string('must be a string'), v.regex(CALL_ID, 'must be a call id'))),
  settlement_id: v.optional(
    v.pipe(
      v.string('must be a string'),
      v.regex(SETTLEMENT_ID, 'must be a settlement id'),
      v.description(
        'a payment settled through /api/v1/facilitator to the treasury (GET /api/v1/settlements)',
      ),
    ),
  ),
  /** Dollars; left out: everything still refundable. */
  amount: v.optional(v.union([v.number(), v.string()], 'must be a number or decimal string')),
  reason: v.optional(
    v.nullable(v.pipe(v.string('must be a string'), v.maxLength(500, 'must be at most 500 characters'))),
  ),
})

export const RefundObject = v.strictObject({
  id: v.string(),
  object: v.literal('refund'),
  status: v.picklist(['pending', 'paid', 'failed']),
  payment_id: v.nullable(v.string()),
  call_id: v.nullable(v.string()),
  settlement_id: v.nullable(v.string()),
  amount: Dollars,
  amount_atomic: Atomic,
  owner_debit_atomic: v.pipe(Atomic, v.description("the merchant's part, taken from its unpaid balance")),
  fee_returned_atomic: v.pipe(Atomic, v.description("the service fee's part, given back by the service")),
  currency: v.literal('USDC'),
  wallet: v.pipe(Address, v.description('where the refund is sent: the address that paid')),
  reason: v.nullable(v.string()),
  payout_id: v.nullable(v.string()),
  transaction: v.nullable(v.pipe(TxHash, v.description('the payout transaction that sent it (or failed)'))),
  failure_reason: v.nullable(v.string()),
  created_at: Timestamp,
  paid_at: NullableTimestamp,
  failed_at: NullableTimestamp,
})

function notFound(id: string): ApiError {
  return new ApiError('not_found', `no refund ${id}`, 'id')
}

export const refundRoutes: Route[] = [
  {
    method: 'POST',
    path: '/refunds',
    auth: true,
    idempotent: true,
    doc: {
      summary:
        'Refund all or part of a paid payment, call or facilitator settlement to the address that paid it',
      description:
        'Exactly one of payment_id, call_id, settlement_id. Sent in the next payout batch. Refused (409 ' +
        'invalid_state) for a payment that is not paid, a call whose payment is not settled, a facilitator ' +
        "settlement not settled yet or paid to the merchant's own wallet, or when the merchant's unpaid " +
        'balance cannot cover its part; 400 ' +
        'invalid_parameter (param amount) when the amount exceeds what is still refundable.',
      body: CreateBody,
      response: { status: 201, schema: RefundObject },
      errors: [404, 409],
    },
    async handler({ body, account, db }) {
      const input = parseBody(CreateBody, body)
      const named = SOURCES.filter((k) => input[k] !== undefined)
      if (named.length !== 1)
        throw new ApiError(
          'invalid_parameter',
          `send exactly one of ${SOURCES.join(', ')}`,
          named[1] ?? SOURCES[0],
        )
      const source = named[0]!
      let amountAtomic: bigint | null = null
      if (input.amount !== undefined) {
        const parsed = parseDollars(input.amount)
        if (!parsed.ok) throw new ApiError('invalid_parameter', `amount ${parsed.reason}`, 'amount')
        amountAtomic = parsed.atomic
      }
      const what = input[source]!
      const target: RefundTarget =
        source === 'payment_id'
          ? { paymentId: what }
          : source === 'call_id'
            ? { callId: what }
            : { settlementId: what }
      const outcome = await createRefund(db, {
        id: newId('re'),
        accountId: account.id,
        target,
        amountAtomic,
        reason: input.reason ?? null,
      })
      switch (outcome.kind) {
        case 'created':
          return { status: 201, body: presentRefund(outcome.refund) }
        case 'not_found':
          // Another account's payment or call is indistinguishable from a missing one.
          throw new ApiError('not_found', `no ${source.slice(0, -3)} ${what}`, source)
        case 'not_refundable':
          throw new ApiError('invalid_state', outcome.detail)
        case 'exceeds_refundable':
          throw new ApiError(
            'invalid_parameter',
            `amount exceeds what is refundable on ${what}: ${toDollars(outcome.refundableAtomic)} ` +
              `(captured ${toDollars(outcome.capturedAtomic)}, already refunded ${toDollars(outcome.refundedAtomic)})`,
            'amount',
          )
        case 'insufficient_balance':
          throw new ApiError(
            'invalid_state',
            `your unpaid balance (${toDollars(outcome.unpaidAtomic)}) cannot cover your part of this refund ` +
              `(${toDollars(outcome.debitAtomic)}); money already paid out is not taken back`,
          )
      }
    },
  },
  {
    method: 'GET',
    path: '/refunds',
    auth: true,
    doc: {
      summary: "The account's refunds, newest first",
      list: true,
      query: {
        payment_id: v.optional(v.string()),
        call_id: v.optional(v.string()),
        settlement_id: v.optional(v.string()),
        status: v.optional(v.picklist(['pending', 'paid', 'failed'])),
      },
      response: { status: 200, schema: listOf(RefundObject) },
    },
    async handler({ query, account, db }) {
      const page = readPage(query)
      const status = query.get('status')
      if (status !== null && !(STATUSES as readonly string[]).includes(status)) {
        throw new ApiError('invalid_parameter', `status: must be one of ${STATUSES.join(', ')}`, 'status')
      }
      const paymentId = query.get('payment_id')
      if (paymentId !== null && !PAYMENT_ID.test(paymentId))
        throw new ApiError('invalid_parameter', 'payment_id: must be a payment id', 'payment_id')
      const callId = query.get('call_id')
      if (callId !== null && !CALL_ID.test(callId))
        throw new ApiError('invalid_parameter', 'call_id: must be a call id', 'call_id')
      const settlementId = query.get('settlement_id')
      if (settlementId !== null && !SETTLEMENT_ID.test(settlementId))
        throw new ApiError('invalid_parameter', 'settlement_id: must be a settlement id', 'settlement_id')
      const rows = await listRefunds(db, {
        accountId: account.id,
        paymentId,
        callId,
        settlementId,
        status: status as RefundStatus | null,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      return { status: 200, body: listResponse(rows, page, presentRefund) }
    },
  },
  {
    method: 'GET',
    path: '/refunds/:id',
    auth: true,
    doc: { summary: 'One refund', response: { status: 200, schema: RefundObject } },
    async handler({ params, account, db }) {
      const id = params.id!
      const row = REFUND_ID.test(id) ? await findRefund(db, account.id, id) : null
      if (!row) throw notFound(id)
      return { status: 200, body: presentRefund(row) }
    },
  },
]
