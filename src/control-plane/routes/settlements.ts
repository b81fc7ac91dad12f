// GET /settlements: the payloads this account's own middleware settled through the facilitator
// (/api/v1/facilitator/settle), newest first, each with its custody, transaction and what was booked.
import * as v from 'valibot'
import { listFacilitatorSettlements, presentFacilitatorSettlement } from '../../books/facilitator.ts'
import { Atomic, listOf, NullableTimestamp, Timestamp } from '../api-schemas.ts'
import { listResponse, readPage } from '../pagination.ts'
import type { Route } from '../route.ts'

export const SettlementObject = v.strictObject({
  id: v.string(),
  object: v.literal('settlement'),
  status: v.picklist(['pending', 'settled', 'failed']),
  custody: v.pipe(
    v.picklist(['treasury', 'merchant']),
    v.description('treasury: paid to tollgate and booked to the account; merchant: paid to its own wallet'),
  ),
  pay_to: v.string(),
  payer: v.string(),
  amount_atomic: Atomic,
  owner_share_atomic: Atomic,
  fee_atomic: Atomic,
  network: v.string(),
  x402_version: v.number(),
  payment_identifier: v.nullable(v.string()),
  transaction: v.nullable(v.string()),
  failure_reason: v.nullable(v.string()),
  created_at: Timestamp,
  settled_at: NullableTimestamp,
})

export const settlementRoutes: Route[] = [
  {
    method: 'GET',
    path: '/settlements',
    auth: true,
    doc: {
      summary: 'Payments settled through the x402 facilitator, newest first',
      list: true,
      response: { status: 200, schema: listOf(SettlementObject) },
    },
    async handler({ query, account, db }) {
      const page = readPage(query)
      const rows = await listFacilitatorSettlements(db, {
        accountId: account.id,
        limit: page.limit + 1,
        startingAfter: page.startingAfter,
      })
      return { status: 200, body: listResponse(rows, page, presentFacilitatorSettlement) }
    },
  },
]
