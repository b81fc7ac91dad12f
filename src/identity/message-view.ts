// A MessageView over headers already read into a plain object (uWS requests die with their callback, so the
// data plane copies the few it needs first; tests build one from a fetch Request).
import type { MessageView } from './signature-base.ts'

export function messageView(q: {
  method: string
  scheme: string
  /** The Host header as received. */
  host: string
  /** Path and query as received ("/m/ep?x=1"). */
  target: string
  /** Lowercased names; repeated fields already combined with ", ". */
  headers: Readonly<Record<string, string>>
}): MessageView {
  const qAt = q.target.indexOf('?')
  const path = qAt < 0 ? q.target : q.target.slice(0, qAt)
  return {
    method: q.method.toUpperCase(),
    scheme: q.scheme,
    authority: normalizeAuthority(q.host, q.scheme),
    path: path === '' ? '/' : path,
    query: qAt < 0 ? '' : q.target.slice(qAt + 1),
    header: (name) => q.headers[name],
  }
}

/** §2.2.3: lowercased, and without the scheme's default port. */
function normalizeAuthority(host: string, scheme: string): string {
  const h = host.toLowerCase()
  if (scheme === 'https' && h.endsWith(':443')) return h.slice(0, -4)
  if (scheme === 'http' && h.endsWith(':80')) return h.slice(0, -3)
  return h
}
