// GET /reports/revenue: revenue per UTC day and the top endpoints over the last `days` days (the dashboard's
// overview). Every day of the window is listed, days without revenue as zero, so a chart needs no gaps logic.
import * as v from 'valibot'
import { revenueByDay, topEndpoints } from '../../db/reports.ts'
import { ApiError } from '../../errors.ts'
import { toDollars } from '../../money.ts'
import { Atomic, Dollars, Timestamp } from '../api-schemas.ts'
import type { Route } from '../route.ts'

const DAY_MS = 86_400_000
const MAX_DAYS = 90

const RevenueDay = v.strictObject({
  date: v.pipe(v.string(), v.description('YYYY-MM-DD, UTC')),
  calls: v.number(),
  payments: v.number(),
  amount: Dollars,
  amount_atomic: Atomic,
})
const TopEndpoint = v.strictObject({
  endpoint_id: v.string(),
  name: v.nullable(v.string()),
  calls: v.number(),
  amount: Dollars,
  amount_atomic: Atomic,
})
const RevenueReport = v.strictObject({
  object: v.literal('revenue_report'),
  currency: v.literal('USDC'),
  from: Timestamp,
  days: v.array(RevenueDay),
  top_endpoints: v.array(TopEndpoint),
})

function readDays(raw: string | null): number {
  if (raw === null) return 30
  if (!/^\d{1,3}$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_DAYS)
    throw new ApiError('invalid_parameter', `days: must be an integer from 1 to ${MAX_DAYS}`, 'days')
  return Number(raw)
}

export const reportRoutes: Route[] = [
  {
    method: 'GET',
    path: '/reports/revenue',
    auth: true,
    doc: {
      summary: 'Revenue per UTC day (captured calls and paid payments, gross) and the top endpoints',
      query: { days: v.optional(v.pipe(v.string(), v.description(`1 to ${MAX_DAYS}, default 30`))) },
      response: { status: 200, schema: RevenueReport },
    },
    async handler({ query, account, db }) {
      const days = readDays(query.get('days'))
      const today = Math.floor(Date.now() / DAY_MS) * DAY_MS
      const from = new Date(today - (days - 1) * DAY_MS)
      const [rows, top] = await Promise.all([
        revenueByDay(db, { accountId: account.id, from }),
        topEndpoints(db, { accountId: account.id, from, limit: 5 }),
      ])
      const byDay = new Map(rows.map((r) => [r.day, r]))
      const out: v.InferOutput<typeof RevenueDay>[] = []
      for (let t = from.getTime(); t <= today; t += DAY_MS) {
        const date = new Date(t).toISOString().slice(0, 10)
        const r = byDay.get(date)
        const atomic = r ? r.calls_atomic + r.payments_atomic : 0n
        out.push({
          date,
          calls: r?.calls ?? 0,
          payments: r?.payments ?? 0,
          amount: toDollars(atomic),
          amount_atomic: atomic.toString(),
        })
      }
      return {
        status: 200,
        body: {
          object: 'revenue_report',
          currency: 'USDC',
          from: from.toISOString(),
          days: out,
          top_endpoints: top.map((e) => ({
            endpoint_id: e.endpoint_id,
            name: e.name,
            calls: e.calls,
            amount: toDollars(e.amount_atomic),
            amount_atomic: e.amount_atomic.toString(),
          })),
        },
      }
    },
  },
]
