// Dashboard sessions as a credential of the /api/v1 routes: an API key is exchanged once for a random token
// held only in an HttpOnly, Secure, SameSite=Strict cookie scoped to /api/v1 (so it never reaches /m/* and
// the merchants' upstreams). A request carrying the cookie instead of an API key is the account's own,
// and a state change must also carry the session's CSRF token in X-CSRF-Token: the token is an HMAC of the
// session secret, so the server checks it without storing it, and only the signed-in page can read it.
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { AccountRow } from '../db/accounts.ts'
import { findSession } from '../db/dashboard-sessions.ts'
import type { Sql } from '../db/sql.ts'
import { ApiError } from '../errors.ts'
import type { ApiRequest } from '../http-exchange.ts'
import { authenticate } from './auth.ts'
import type { KeyCache } from './key-cache.ts'

/** `__Secure-`: a browser accepts it only with Secure, so no plain-http page can plant one. */
export const SESSION_COOKIE = '__Secure-tollgate_session'
export const CSRF_HEADER = 'x-csrf-token'
/** Absolute lifetime of a session; signing in again starts a new one. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000
const COOKIE_PATH = '/api/v1'
const TOKEN = /^[A-Za-z0-9_-]{43}$/
const SAFE_METHODS = new Set(['GET', 'HEAD'])

export function newSessionToken(): string {
  return randomBytes(32).toString('base64url')
}

export function hashSessionToken(token: string): Buffer {
  return createHash('sha256').update(token).digest()
}

export function csrfTokenFor(token: string): string {
  return createHmac('sha256', token).update('tollgate dashboard csrf').digest('base64url')
}

export function sessionCookie(token: string, maxAgeMs: number): string {
  return `${SESSION_COOKIE}=${token}; Path=${COOKIE_PATH}; Max-Age=${Math.floor(maxAgeMs / 1000)}; HttpOnly; Secure; SameSite=Strict`
}

export function clearedSessionCookie(): string {
  return `${SESSION_COOKIE}=; Path=${COOKIE_PATH}; Max-Age=0; HttpOnly; Secure; SameSite=Strict`
}

/** The session token of the Cookie header, or null when there is none (a malformed one is 'invalid'). */
export function readSessionToken(cookieHeader: string | undefined): string | null | 'invalid' {
  if (!cookieHeader) return null
  for (const part of cookieHeader.split(/;\s*|,\s*/)) {
    const eq = part.indexOf('=')
    if (eq < 0 || part.slice(0, eq).trim() !== SESSION_COOKIE) continue
    const value = part.slice(eq + 1).trim()
    return TOKEN.test(value) ? value : 'invalid'
  }
  return null
}

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

export interface SessionAuth {
  account: AccountRow
  token: string
  expiresAt: Date
}

/**
 * The signed-in session of this request; CSRF is checked first for a state change (before any database
 * read), then the session: unknown or revoked → invalid_session, past its time or its key's → session_expired.
 */
export async function requireSession(sql: Sql, req: ApiRequest): Promise<SessionAuth> {
  const token = readSessionToken(req.headers.cookie)
  if (token === null)
    throw new ApiError('invalid_session', 'sign in to the dashboard first (no session cookie)')
  if (token === 'invalid') throw new ApiError('invalid_session')
  if (!SAFE_METHODS.has(req.method)) {
    const sent = req.headers[CSRF_HEADER]
    if (!sent || !sameToken(sent, csrfTokenFor(token))) throw new ApiError('invalid_csrf_token')
  }
  const found = await findSession(sql, hashSessionToken(token))
  if (!found.ok) throw new ApiError(found.reason === 'expired' ? 'session_expired' : 'invalid_session')
  return { account: found.session.account, token, expiresAt: found.session.expires_at }
}

/**
 * The credential of an authenticated route: an API key when Authorization is sent (as before), else a
 * dashboard session cookie with its CSRF token; neither → missing_api_key.
 */
export async function authenticateRequest(sql: Sql, keys: KeyCache, req: ApiRequest): Promise<AccountRow> {
  if (req.headers.authorization === undefined && readSessionToken(req.headers.cookie) !== null)
    return (await requireSession(sql, req)).account
  return authenticate(sql, keys, req.headers.authorization)
}
