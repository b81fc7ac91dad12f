// /payments: standard payments a merchant creates and a customer pays on the hosted checkout (payment_url).
import * as v from 'valibot'
import { cancelPayment, createPayment } from '../../books/payments.ts'
import { type PaymentView, presentPayment, presentTimeline } from '../../db/payment-presenter.ts'
import { findOwnedPayment, listPayments, type PaymentRow, paymentTimeline } from '../../db/payments.ts'
import { ApiError } from '../../errors.ts'
import { newId } from '../../ids.ts'
import { configDollars, parseDollars } from '../../money.ts'
import {
  Address,
  Atomic,
  Dollars,
  listOf,
  Network,
  NullableTimestamp,
  Timestamp,
  TxHash,
} from '../api-schemas.ts'
import type { ControlPlaneDeps } from '../deps.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'
import { parseBody } from '../validation.ts'

const MIN_EXPIRES_IN_S = 60
const MAX_EXPIRES_IN_S = 30 * 24 * 60 * 60
const STATUSES = ['pending', 'paid', 'expired', 'canceled'] as const

const ReturnUrl = v.pipe(
  v.string('must be a string'),
  v.maxLength(2048, 'must be at most 2048 characters'),
  v.check((s) => {
    try {
      const u = new URL(s)
      return u.protocol === 'https:' || u.protocol === 'http:'
    } catch {
      return false
    }
  }, 'must be an absolute http(s) URL'),
)

/** Shown as an <img> on the checkout page: https only, so the page never loads mixed content. */
const LogoUrl = v.pipe(
  v.string('must be a string'),
  v.maxLength(2048, 'must be at most 2048 characters'),
  v.check((s) => {
    try {
      return new URL(s).protocol === 'https:'
    } catch {
      return false
    }
  }, 'must be an absolute https URL'),
)

const Metadata = v.pipe(
  v.record(
    v.pipe(v.string(), v.maxLength(40, 'keys must be at most 40 characters')),
    v.pipe(v.string('values must be strings'), v.maxLength(500, 'values must be at most 500 characters')),
    'must be an object of string values',
  ),
  v.check((m) => Object.keys(m).length <= 50, 'at most 50 keys'),
)

const CreateBody = v.strictObject({
  amount: v.union([v.number(), v.string()], 'must be a number or decimal string'),
  description: v.pipe(
    v.string('must be a string'),
    v.trim(),
    v.minLength(1, 'must not be empty'),
    v.maxLength(1000, 'must be at most 1000 characters'),
  ),
  metadata: v.optional(Metadata),
  /** Seconds until the payment expires. */
  expires_in: v.optional(
    v.pipe(
      v.number('must be a number of seconds'),
      v.integer('must be a whole number of seconds'),
      v.minValue(MIN_EXPIRES_IN_S, `must be at least ${MIN_EXPIRES_IN_S} seconds`),
      v.maxValue(MAX_EXPIRES_IN_S, `must be at most ${MAX_EXPIRES_IN_S} seconds (30 days)`),
    ),
  ),
  /** `{CHECKOUT_SESSION_ID}` (or `{PAYMENT_ID}`) in these is replaced by the payment id on the page. */
  success_url: v.optional(v.nullable(ReturnUrl)),
  cancel_url: v.optional(v.nullable(ReturnUrl)),
  logo_url: v.optional(v.nullable(LogoUrl)),
})

export const PaymentObject = v.strictObject({
  id: v.string(),
  object: v.literal('payment'),
  status: v.picklist(STATUSES),
  amount: Dollars,
  amount_atomic: Atomic,
  amount_requested: v.pipe(
    Dollars,
    v.description(
      'the exact figure a plain transfer must carry to be matched to this payment (amount + offset)',
    ),
  ),
  amount_requested_atomic: Atomic,
  amount_received: Dollars,
  amount_received_atomic: Atomic,
  amount_due: Dollars,
  amount_due_atomic: Atomic,
  amount_surplus_atomic: v.pipe(
    Atomic,
    v.description('received beyond the requested figure: scheduled for refund'),
  ),
  currency: v.literal('USDC'),
  description: v.string(),
  metadata: v.record(v.string(), v.string()),
  recipient: Address,
  network: Network,
  chain_id: v.number(),
  asset: Address,
  payment_url: v.pipe(v.string(), v.description('{host}/pay/{payment_id}: the hosted checkout')),
  success_url: v.nullable(v.string()),
  cancel_url: v.nullable(v.string()),
  logo_url: v.nullable(v.string()),
  created_at: Timestamp,
  expires_at: Timestamp,
  paid_at: NullableTimestamp,
  canceled_at: NullableTimestamp,
  transaction: v.nullable(TxHash),
  payer: v.nullable(Address),
})

/** One step of a payment's history; the fields beside type and created_at depend on the type. */
const TimelineEntry = v.looseObject({ type: v.string(), created_at: Timestamp })
const PaymentWithTimeline = v.strictObject({ ...PaymentObject.entries, timeline: v.array(TimelineEntry) })

function readAmount(raw: unknown, deps: ControlPlaneDeps): bigint {
  const parsed = parseDollars(raw, configDollars(deps.config.payments.max_amount))
  if (!parsed.ok) throw new ApiError('invalid_parameter', `amount ${parsed.reason}`, 'amount')
  return parsed.atomic
}

function viewOf(deps: ControlPlaneDeps): PaymentView {
  return {
    publicUrl: deps.publicUrl(),
    network: deps.chain.network,
    chainId: deps.chain.chainId,
    treasury: deps.chain.treasury,
    usdcAddress: deps.chain.usdcAddress,
  }
}

const PAYMENT_ID = /^pay_[0-9A-Za-z]{1,64}$/

function notFound(id: string): ApiError {
  return new ApiError('not_found', `no payment ${id}`, 'id')
}

export const paymentRoutes: Route[] = [
  {
    method: 'POST',
    path: '/payments',
    auth: true,
    idempotent: true,
    doc: {
      summary: 'Create a payment; the customer pays it at payment_url',
      body: CreateBody,
      response: { status: 201, schema: PaymentObject },
    },
    async handler({ body, account, db, deps }) {
      const input = parseBody(CreateBody, body)
      const amountAtomic = readAmount(input.amount, deps)
      const payment = {
        id: newId('pay'),
        accountId: account.id,
        amountAtomic,
        description: input.description,
        metadata: input.metadata ?? {},
        successUrl: input.success_url ?? null,
        cancelUrl: input.cancel_url ?? null,
        logoUrl: input.logo_url ?? null,
        expiresInMs:
          input.expires_in !== undefined
            ? input.expires_in * 1000
            : deps.config.payments.default_expires_in_ms,
      }
      // Inside an idempotent request's transaction the creation is that transaction's; otherwise it shares
      // a commit with the creations requested beside it.
      const created =
        db === deps.sql ? await deps.paymentCreator.create(payment) : await createPayment(db, payment)
      if (created.kind === 'figures_exhausted') {
        // Every figure of this price (price + 0.000001 … 0.009999) is taken by an open or recently closed
        // payment: a new one could not be told apart from them on chain.
        throw new ApiError(
          'service_unavailable',
          'too many open payments of this amount; retry later or use a slightly different amount',
          'amount',
          { 'retry-after': '60' },
        )
      }
      const row = created.payment
      return { status: 201, body: presentPayment(row, viewOf(deps)) }
    },
  },
  {
    method: 'GET',
    path: '/payments',
    auth: true,
    doc: {
      summary: "The account's payments, newest first",
      list: true,
      query: { status: v.optional(v.picklist(STATUSES)) },
      response: { status: 200, schema: listOf(PaymentObject) },
    },
    async handler({ query, account, db, deps }) {
      const page = readPage(query)
      const status = query.get('status')
      if (status !== null && !(STATUSES as readonly string[]).includes(status)) {
        throw new ApiError('invalid_parameter', `status: must be one of ${STATUSES.join(', ')}`, 'status')
      }
      const rows = await listPayments(db, {
        accountId: account.id,
        status: status as PaymentRow['status'] | null,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      const view = viewOf(deps)
      return { status: 200, body: listResponse(rows, page, (p) => presentPayment(p, view)) }
    },
  },
  {
    method: 'GET',
    path: '/payments/:id',
    auth: true,
    doc: { summary: 'One payment with its timeline', response: { status: 200, schema: PaymentWithTimeline } },
    async handler({ params, account, db, deps }) {
      const id = params.id!
      const row = PAYMENT_ID.test(id) ? await findOwnedPayment(db, account.id, id) : null
      // Another account's payment is indistinguishable from a missing one.
      if (!row) throw notFound(id)
      const timeline = await paymentTimeline(db, id)
      return {
        status: 200,
        body: { ...presentPayment(row, viewOf(deps)), timeline: presentTimeline(timeline) },
      }
    },
  },
  {
    method: 'POST',
    path: '/payments/:id/cancel',
    auth: true,
    doc: {
      summary: 'Cancel a pending payment (409 invalid_state otherwise)',
      body: v.strictObject({}),
      bodyOptional: true,
      response: { status: 200, schema: PaymentObject },
      errors: [409],
    },
    async handler({ params, account, body, deps }) {
      if (body !== undefined) parseBody(v.strictObject({}), body)
      const id = params.id!
      if (!PAYMENT_ID.test(id)) throw notFound(id)
      const view = viewOf(deps)
      const outcome = await cancelPayment(deps.sql, { accountId: account.id, id, view })
      if (outcome.kind === 'not_found') throw notFound(id)
      if (outcome.kind === 'invalid_state') {
        throw new ApiError(
          'invalid_state',
          `payment ${id} is ${outcome.payment.status}; only a pending payment can be canceled`,
        )
      }
      return { status: 200, body: presentPayment(outcome.payment, view) }
    },
  },
]
