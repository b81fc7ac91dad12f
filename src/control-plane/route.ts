// What a route file declares: method, path pattern, whether it needs an API key, and its handler.

import type { AccountRow } from '../db/accounts.ts'
import type { Sql, Tx } from '../db/sql.ts'
import type { ApiRequest } from '../http-exchange.ts'
import type { ControlPlaneDeps } from './deps.ts'

export interface RouteContext {
  req: ApiRequest
  params: Readonly<Record<string, string>>
  query: URLSearchParams
  /** The parsed JSON body (undefined when the request had none). Validate it with valibot before use. */
  body: unknown
  /** The authenticated account (routes with auth: true only). */
  account: AccountRow
  /** The transaction of an idempotent create, or the pool. */
  db: Sql | Tx
  deps: ControlPlaneDeps
}

export interface RouteResult {
  status: number
  body: unknown
  headers?: Record<string, string>
}

export interface Route {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
  /** '/endpoints/:id' below /api/v1. */
  path: string
  auth: boolean
  /** Creating POSTs honour Idempotency-Key. */
  idempotent?: boolean
  handler(ctx: RouteContext): Promise<RouteResult>
}
