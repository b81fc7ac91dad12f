// The /api/v1 handler: routing, the API conventions (JSON only, error shape, auth, idempotency), error mapping.
import { DATABASE_RETRY_AFTER_S, isDatabaseUnavailable } from '../db/unavailable.ts'
import { ApiError, apiErrorResponse } from '../errors.ts'
import type { ApiHandler, ApiRequest, ApiResponse } from '../http-exchange.ts'
import { httpDuration, httpRequests, statusClass } from '../observability/metrics.ts'
import { endSpan, startRequestSpan, tracing, withSpan } from '../observability/tracing.ts'
import type { ControlPlaneDeps } from './deps.ts'
import { requestFingerprint, withIdempotency } from './idempotency.ts'
import { openApiRoute } from './openapi.ts'
import type { Route, RouteContext, RouteResult } from './route.ts'
import { accountRoutes } from './routes/accounts.ts'
import { callRoutes } from './routes/calls.ts'
import { endpointRoutes } from './routes/endpoints.ts'
import { facilitatorRoutes } from './routes/facilitator.ts'
import { paymentRoutes } from './routes/payments.ts'
import { payoutRoutes } from './routes/payouts.ts'
import { refundRoutes } from './routes/refunds.ts'
import { reportRoutes } from './routes/reports.ts'
import { sessionRoutes } from './routes/sessions.ts'
import { settlementRoutes } from './routes/settlements.ts'
import { webhookRoutes } from './routes/webhooks.ts'
import { authenticateRequest } from './sessions.ts'

export const API_PREFIX = '/api/v1'

interface CompiledRoute {
  route: Route
  pattern: RegExp
  names: string[]
}

function compile(route: Route): CompiledRoute {
  const names: string[] = []
  const source = route.path.replace(/:([a-z_]+)/g, (_m, name: string) => {
    names.push(name)
    return '([^/]+)'
  })
  return { route, pattern: new RegExp(`^${source}/?$`), names }
}

const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }

/** Every /api/v1 route; the OpenAPI document describes exactly these. */
export const API_ROUTES: readonly Route[] = [
  ...accountRoutes,
  ...endpointRoutes,
  ...callRoutes,
  ...paymentRoutes,
  ...webhookRoutes,
  ...payoutRoutes,
  ...refundRoutes,
  ...sessionRoutes,
  ...reportRoutes,
  ...facilitatorRoutes,
  ...settlementRoutes,
  openApiRoute(() => API_ROUTES),
]

export function createApiHandler(deps: ControlPlaneDeps, extraRoutes: Route[] = []): ApiHandler {
  const routes = [...API_ROUTES, ...extraRoutes].map(compile)
  // Requests whose API key authenticated: their answer says so, for the edge's failed-key limits.
  const authenticated = new WeakSet<ApiRequest>()

  return function handleApi(req: ApiRequest): Promise<ApiResponse> {
    if (!tracing.on) return answer(req)
    // One span per API request, active while it runs: queries and log lines below see its trace id.
    const span = startRequestSpan(`${req.method} /api/v1`, req.headers.traceparent, {
      'http.request.method': req.method,
      'url.path': req.path,
      'tollgate.request_id': req.requestId,
    })
    return withSpan(span, () => answer(req)).then((response) => {
      endSpan(span, response.status)
      return response
    })
  }

  async function answer(req: ApiRequest): Promise<ApiResponse> {
    const started = performance.now()
    let response: ApiResponse
    try {
      const result = await dispatch(req)
      response = {
        status: result.status,
        headers: { ...JSON_HEADERS, ...result.headers, 'x-request-id': req.requestId },
        body: JSON.stringify(result.body),
      }
    } catch (err) {
      const apiError = err instanceof ApiError ? err : internalError(err, req)
      // A 5xx the routes chose (e.g. service_unavailable) is logged here; internalError logged the others.
      if (apiError === err && apiError.status >= 500)
        deps.logger.error('api request failed', { request_id: req.requestId, path: req.path, err })
      response = apiErrorResponse(apiError, req.requestId, JSON_HEADERS)
    }
    if (authenticated.has(req)) response.authenticated = true
    const cls = statusClass(response.status)
    httpRequests.labels('api', cls).inc()
    httpDuration.labels('api', cls).observe((performance.now() - started) / 1000)
    return response
  }

  function internalError(err: unknown, req: ApiRequest): ApiError {
    // A restarting or unreachable database is not a bug: 503, retry shortly (nothing was changed).
    if (isDatabaseUnavailable(err)) {
      deps.logger.warn('api request: database unavailable', {
        request_id: req.requestId,
        path: req.path,
        err,
      })
      return new ApiError('service_unavailable', 'the database is unavailable; retry shortly', undefined, {
        'retry-after': String(DATABASE_RETRY_AFTER_S),
      })
    }
    deps.logger.error('api request failed', { request_id: req.requestId, path: req.path, err })
    return new ApiError('internal_error', 'something went wrong on our side; it has been logged')
  }

  async function dispatch(req: ApiRequest): Promise<RouteResult> {
    const path = req.path.slice(API_PREFIX.length) || '/'
    let pathMatched = false
    for (const compiled of routes) {
      const m = compiled.pattern.exec(path)
      if (!m) continue
      pathMatched = true
      if (compiled.route.method !== req.method) continue
      const params: Record<string, string> = {}
      compiled.names.forEach((name, i) => {
        params[name] = decodeURIComponent(m[i + 1]!)
      })
      return run(compiled.route, req, params)
    }
    if (pathMatched) throw new ApiError('method_not_allowed', `${req.method} is not allowed on ${req.path}`)
    throw new ApiError('route_not_found', `no route ${req.method} ${req.path}`)
  }

  async function run(route: Route, req: ApiRequest, params: Record<string, string>): Promise<RouteResult> {
    const body = parseJsonBody(req)
    const account = route.auth ? await authenticateRequest(deps.sql, deps.keys, req) : undefined
    if (account) authenticated.add(req)
    const ctx: RouteContext = {
      req,
      params,
      query: new URLSearchParams(req.query),
      body,
      account: account!,
      db: deps.sql,
      deps,
    }
    const key = req.headers['idempotency-key']
    if (route.idempotent && key !== undefined && account) {
      const fingerprint = requestFingerprint(req.method, req.path, req.body)
      return withIdempotency(deps.sql, { accountId: account.id, key, fingerprint }, (tx) =>
        route.handler({ ...ctx, db: tx }),
      )
    }
    return route.handler(ctx)
  }
}

/** JSON only: a body must say it is JSON and parse as JSON. An empty body is "no body". */
function parseJsonBody(req: ApiRequest): unknown {
  if (req.body.length === 0) return undefined
  const type = req.headers['content-type'] ?? ''
  if (!/^application\/([a-z.+-]*\+)?json\s*(;|$)/i.test(type)) {
    throw new ApiError('unsupported_media_type', 'send the body as JSON with Content-Type: application/json')
  }
  try {
    return JSON.parse(req.body.toString('utf8'))
  } catch (err) {
    throw new ApiError('invalid_json', `the body is not valid JSON: ${(err as Error).message}`)
  }
}
