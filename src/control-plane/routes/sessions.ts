// POST /dashboard/sessions (sign in with an API key), GET and DELETE /dashboard/session (who am I; logout).
// The session itself is a cookie (see ../sessions.ts); these answers carry the CSRF token the page sends back.
import * as v from 'valibot'
import { findLiveKey, insertSession, pruneEndedSessions, revokeSession } from '../../db/dashboard-sessions.ts'
import { ApiError } from '../../errors.ts'
import { API_KEY_FORMAT, hashApiKey } from '../../ids.ts'
import { Timestamp } from '../api-schemas.ts'
import type { ControlPlaneDeps } from '../deps.ts'
import type { Route } from '../route.ts'
import {
  clearedSessionCookie,
  csrfTokenFor,
  hashSessionToken,
  newSessionToken,
  requireSession,
  SESSION_TTL_MS,
  sessionCookie,
} from '../sessions.ts'
import { parseBody } from '../validation.ts'
import { AccountObject, presentAccount } from './accounts.ts'

/** How long an ended session's row is kept (who signed in when, for the merchant's support questions). */
const ENDED_SESSION_RETENTION_MS = 7 * 24 * 60 * 60 * 1000

const SignInBody = v.strictObject({ api_key: v.pipe(v.string('must be a string'), v.maxLength(100)) })

const SessionObject = v.strictObject({
  object: v.literal('dashboard_session'),
  account: AccountObject,
  csrf_token: v.pipe(v.string(), v.description('send it as X-CSRF-Token on every state change')),
  expires_at: Timestamp,
})
const EndedSession = v.strictObject({ object: v.literal('dashboard_session'), revoked: v.literal(true) })

function present(
  account: Parameters<typeof presentAccount>[0],
  deps: ControlPlaneDeps,
  token: string,
  expiresAt: Date,
): v.InferOutput<typeof SessionObject> {
  return {
    object: 'dashboard_session',
    account: presentAccount(account, deps),
    csrf_token: csrfTokenFor(token),
    expires_at: expiresAt.toISOString(),
  }
}

export const sessionRoutes: Route[] = [
  {
    method: 'POST',
    path: '/dashboard/sessions',
    auth: false,
    doc: {
      summary: 'Sign in to the dashboard: the API key is exchanged for a session cookie',
      description:
        'Sets an HttpOnly, Secure, SameSite=Strict cookie scoped to /api/v1, valid 12 h, while the key works. ' +
        'With the cookie (and no Authorization header) every /api/v1 route acts for the account; a POST, ' +
        'PATCH or DELETE must also send X-CSRF-Token: csrf_token (403 invalid_csrf_token otherwise).',
      body: SignInBody,
      response: { status: 201, schema: SessionObject },
      errors: [401],
    },
    async handler({ body, deps, req }) {
      const input = parseBody(SignInBody, body)
      // Never echo the presented key back: it may be a real secret typed into the wrong field.
      const key = input.api_key.trim()
      const found = API_KEY_FORMAT.test(key) ? await findLiveKey(deps.sql, hashApiKey(key)) : null
      if (!found) throw new ApiError('invalid_api_key', 'the API key is not valid', 'api_key')
      const token = newSessionToken()
      const expiresAt = await insertSession(deps.sql, {
        tokenHash: hashSessionToken(token),
        accountId: found.account.id,
        keyId: found.keyId,
        ttlMs: SESSION_TTL_MS,
        userAgent: req.headers['user-agent']?.slice(0, 300) ?? null,
      })
      // Sign-ins add rows; this account's long-ended ones go now, so the table stays its live sessions.
      await pruneEndedSessions(deps.sql, found.account.id, ENDED_SESSION_RETENTION_MS)
      return {
        status: 201,
        headers: { 'set-cookie': sessionCookie(token, SESSION_TTL_MS) },
        body: present(found.account, deps, token, expiresAt),
      }
    },
  },
  {
    method: 'GET',
    path: '/dashboard/session',
    auth: false,
    doc: {
      summary: 'The signed-in dashboard session (by its cookie) with its CSRF token',
      response: { status: 200, schema: SessionObject },
      errors: [401],
    },
    async handler({ deps, req }) {
      const s = await requireSession(deps.sql, req)
      return { status: 200, body: present(s.account, deps, s.token, s.expiresAt) }
    },
  },
  {
    method: 'DELETE',
    path: '/dashboard/session',
    auth: false,
    doc: {
      summary: 'Sign out: the session stops working now and its cookie is cleared',
      response: { status: 200, schema: EndedSession },
      errors: [401, 403],
    },
    async handler({ deps, req }) {
      const s = await requireSession(deps.sql, req)
      await revokeSession(deps.sql, hashSessionToken(s.token))
      return {
        status: 200,
        headers: { 'set-cookie': clearedSessionCookie() },
        body: { object: 'dashboard_session', revoked: true },
      }
    },
  },
]
