// What a route file declares: method, path pattern, whether it needs an API key, and its handler.

import type * as v from 'valibot'
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
  /** What the OpenAPI document says about it (openapi.ts); required so no route goes undocumented. */
  doc: RouteDoc
  handler(ctx: RouteContext): Promise<RouteResult>
}

export interface RouteDoc {
  summary: string
  description?: string
  /** The request body's schema (the one the handler parses with parseBody). */
  body?: v.GenericSchema
  /** Whether the body may be left out (e.g. roll, redeliver). */
  bodyOptional?: boolean
  /** Query parameters (a list route's pagination is added by `list: true`). */
  query?: v.ObjectEntries
  list?: boolean
  /** The success answer: status and schema. */
  response: { status: number; schema: v.GenericSchema; description?: string }
  /** Error statuses this route can answer beyond those its shape implies (auth, body, path id). */
  errors?: number[]
}
