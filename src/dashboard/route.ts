// {host}/dashboard: the merchant's dashboard, static files only. The page signs in and acts through the
// /api/v1 routes (a session cookie + CSRF header; see control-plane/sessions.ts), so this route holds no
// account state and no second implementation of anything: it serves index.html and its hashed assets.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { UwsRoute } from '../data-plane/app.ts'
import { statusLine } from '../data-plane/uws.ts'
import { errorBody, errorStatusLine, JSON_CONTENT_TYPE } from '../errors.ts'
import { httpRequests } from '../observability/metrics.ts'
import { requestIdFrom } from '../request-id.ts'

const PAGE_DIR = new URL('./page/', import.meta.url)

/**
 * default-src 'none': only the page's own stylesheet and scripts, API fetches to this origin, and data: images;
 * no inline script or style, no framing, no form posts anywhere (the page submits through fetch).
 */
export const DASHBOARD_CSP =
  "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const ASSET_CACHE = 'public, max-age=31536000, immutable'

interface Asset {
  type: string
  body: Buffer
}

const CSS = 'text/css; charset=utf-8'
const JS = 'text/javascript; charset=utf-8'
/** A static import of a sibling module: `from './api.js'` (the page's modules import nothing else). */
const SIBLING_IMPORT = /(\bfrom\s+|\bimport\s+)'\.\/([\w-]+\.js)'/g

type Named = { name: string; path: string } & Asset

function hashed(name: string, type: string, body: Buffer): Named {
  const digest = createHash('sha256').update(body).digest('hex').slice(0, 12)
  const dot = name.lastIndexOf('.')
  return { name, path: `${name.slice(0, dot)}.${digest}${name.slice(dot)}`, type, body }
}

function asset(name: string, type: string): Named {
  return hashed(name, type, readFileSync(new URL(name, PAGE_DIR)))
}

/**
 * An ES module and the modules it imports, each under its content-hashed name: its imports are rewritten
 * to their hashed names before it is hashed itself, so a change anywhere below renames every module above
 * it and the year-long immutable cache never serves a stale one. The modules import no circle.
 */
function moduleGraph(entry: string, out = new Map<string, Named>(), open = new Set<string>()): Named {
  const done = out.get(entry)
  if (done) return done
  if (open.has(entry)) throw new Error(`dashboard modules import in a circle through ${entry}`)
  open.add(entry)
  const text = readFileSync(new URL(entry, PAGE_DIR), 'utf8').replace(
    SIBLING_IMPORT,
    (_, head: string, dep: string) => `${head}'./${moduleGraph(dep, out, open).path}'`,
  )
  open.delete(entry)
  const named = hashed(entry, JS, Buffer.from(text))
  out.set(entry, named)
  return named
}

/** Reads the page's files once; index.html names the assets by their content hashes. */
export function loadDashboard(): { html: Buffer; assets: Map<string, Asset> } {
  const modules = new Map<string, Named>()
  moduleGraph('dashboard.js', modules)
  const files = [asset('dashboard.css', CSS), ...modules.values()]
  let html = readFileSync(new URL('index.html', PAGE_DIR), 'utf8')
  for (const f of files) html = html.replaceAll(`%${f.name}%`, `/dashboard/assets/${f.path}`)
  return { html: Buffer.from(html), assets: new Map(files.map((f) => [f.path, f])) }
}

export function createDashboardRoute(): UwsRoute {
  const { html, assets } = loadDashboard()
  return (res, req) => {
    const method = req.getCaseSensitiveMethod().toUpperCase()
    const url = req.getUrl()
    const requestId = requestIdFrom(req.getHeader('x-request-id'))
    const send = (status: number, type: string, body: Buffer | string, headers: Array<[string, string]>) => {
      httpRequests.labels('dashboard', status < 400 ? '2xx' : '4xx').inc()
      res
        .writeStatus(statusLine(status))
        .writeHeader('content-type', type)
        .writeHeader('x-request-id', requestId)
      res.writeHeader('x-content-type-options', 'nosniff')
      for (const [k, v] of headers) res.writeHeader(k, v)
      res.end(method === 'HEAD' ? undefined : body)
    }
    const notFound = () => {
      httpRequests.labels('dashboard', '4xx').inc()
      res
        .writeStatus(errorStatusLine('route_not_found'))
        .writeHeader('content-type', JSON_CONTENT_TYPE)
        .writeHeader('x-request-id', requestId)
        .end(errorBody('route_not_found', requestId, { message: `no route ${method} ${url}` }))
    }
    if (method !== 'GET' && method !== 'HEAD') return notFound()
    if (url === '/dashboard' || url === '/dashboard/') {
      return send(200, 'text/html; charset=utf-8', html, [
        ['content-security-policy', DASHBOARD_CSP],
        ['referrer-policy', 'no-referrer'],
        ['x-frame-options', 'DENY'],
        ['cache-control', 'no-store'],
      ])
    }
    const found = url.startsWith('/dashboard/assets/')
      ? assets.get(url.slice('/dashboard/assets/'.length))
      : undefined
    if (!found) return notFound()
    send(200, found.type, found.body, [['cache-control', ASSET_CACHE]])
  }
}
