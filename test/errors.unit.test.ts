import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { ApiError, apiErrorResponse, ERRORS, type ErrorCode, errorBody } from '../src/errors.ts'
import { nextRequestId, requestIdFrom } from '../src/request-id.ts'

describe('the error registry', () => {
  it('every code is documented in docs/api.md', () => {
    const doc = readFileSync(join(import.meta.dirname, '../docs/api.md'), 'utf8')
    const missing = Object.keys(ERRORS).filter((code) => !doc.includes(`\`${code}\``))
    expect(missing).toEqual([])
  })

  it('every code has an HTTP error status, a type and a message', () => {
    for (const [code, spec] of Object.entries(ERRORS)) {
      expect(spec.status, code).toBeGreaterThanOrEqual(400)
      expect(spec.status, code).toBeLessThan(600)
      expect(spec.message.length, code).toBeGreaterThan(5)
    }
  })

  it('writes the same shape from the precomputed and the detailed paths', () => {
    const plain = JSON.parse(errorBody('upstream_timeout', 'req_1'))
    expect(plain).toEqual({
      error: { type: 'upstream_error', code: 'upstream_timeout', message: ERRORS.upstream_timeout.message },
      request_id: 'req_1',
    })
    const detailed = JSON.parse(
      errorBody('invalid_parameter', 'req_2', { message: 'missing field x', param: 'x', extra: { more: 1 } }),
    )
    expect(detailed).toEqual({
      error: {
        type: 'invalid_request_error',
        code: 'invalid_parameter',
        message: 'missing field x',
        param: 'x',
      },
      more: 1,
      request_id: 'req_2',
    })
  })

  it('escapes what a caller put in a message', () => {
    const body = errorBody('endpoint_not_found', 'req_3', { message: 'no active metered endpoint ep_"},{"x' })
    expect(JSON.parse(body).error.message).toBe('no active metered endpoint ep_"},{"x')
  })

  it('maps an ApiError to its status, headers and body, keeping its cause', () => {
    const cause = new Error('db down')
    const err = new ApiError('rate_limited', undefined, undefined, { 'retry-after': '3' }, { cause })
    expect(err.cause).toBe(cause)
    const response = apiErrorResponse(err, 'req_4', { 'content-type': 'application/json' })
    expect(response.status).toBe(429)
    expect(response.headers).toMatchObject({ 'retry-after': '3', 'x-request-id': 'req_4' })
    expect(JSON.parse(response.body)).toMatchObject({ error: { code: 'rate_limited' }, request_id: 'req_4' })
  })
})

describe('request ids', () => {
  it('takes a sane incoming id and replaces anything else', () => {
    expect(requestIdFrom('abc-123_X.y')).toBe('abc-123_X.y')
    for (const bad of [undefined, '', 'a b', 'a"b', 'a\\b', 'é', 'x'.repeat(129)]) {
      expect(requestIdFrom(bad)).toMatch(/^req_[0-9a-f]{12}/)
    }
    expect(requestIdFrom('x'.repeat(128))).toBe('x'.repeat(128))
  })

  it('generates distinct ids', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => nextRequestId()))
    expect(ids.size).toBe(1000)
  })

  it('codes are typed', () => {
    const code: ErrorCode = 'not_found'
    expect(ERRORS[code].status).toBe(404)
  })
})
