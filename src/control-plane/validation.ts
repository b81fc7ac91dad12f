// Runs a valibot schema on a request body and turns the first issue into a 400 that names the field and says
// what was wrong: `missing field X`, `unknown field X`, or `X must be …` (what was expected).
import * as v from 'valibot'
import { ApiError } from '../errors.ts'

export function parseBody<S extends v.GenericSchema>(schema: S, input: unknown): v.InferOutput<S> {
  if (input === undefined) throw new ApiError('invalid_body', 'a JSON object body is required')
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new ApiError('invalid_body', 'the body must be a JSON object')
  }
  const result = v.safeParse(schema, input, { abortEarly: true })
  if (result.success) return result.output
  throw issueToError(result.issues[0])
}

/** The API error for one valibot issue; exported for the tests that pin each wording. */
export function issueToError(issue: v.BaseIssue<unknown>): ApiError {
  const param = issue.path?.map((p) => String(p.key)).join('.')
  if (!param) return new ApiError('invalid_body', issue.message)
  // strict_object reports both a missing key (expected '"key"', received 'undefined') and an unknown key
  // (expected 'never') as a key issue: tell them apart, or a missing field reads as an unknown one.
  if (issue.kind === 'schema' && (issue.type === 'strict_object' || issue.type === 'object')) {
    const last = issue.path![issue.path!.length - 1]!
    if (issue.expected === 'never') return new ApiError('invalid_parameter', `unknown field ${param}`, param)
    if (issue.received === 'undefined' && last.value === undefined) {
      return new ApiError('invalid_parameter', `missing field ${param}`, param)
    }
  }
  return new ApiError('invalid_parameter', `${param} ${expectation(issue)}`, param)
}

/**
 * A route's own message ('must be a string') is kept; valibot's default ('Invalid length: Expected <=2048 but
 * received 3000') is turned into the same voice from the issue's type and expectation.
 */
function expectation(issue: v.BaseIssue<unknown>): string {
  if (!issue.message.startsWith('Invalid ')) return issue.message
  const expected = issue.expected ?? ''
  switch (issue.type) {
    case 'max_length':
      return `must be at most ${expected.replace(/^<=/, '')} long`
    case 'min_length':
      return `must be at least ${expected.replace(/^>=/, '')} long`
    case 'max_value':
      return `must be at most ${expected.replace(/^<=/, '')}`
    case 'min_value':
      return `must be at least ${expected.replace(/^>=/, '')}`
    case 'integer':
      return 'must be an integer'
    case 'picklist':
      return `must be one of ${expected.replaceAll(' | ', ', ')}`
    case 'string':
    case 'number':
    case 'boolean':
    case 'array':
    case 'object':
    case 'strict_object':
    case 'record':
      return `must be ${article(issue.type === 'strict_object' || issue.type === 'record' ? 'object' : issue.type)}`
    default:
      return `must be ${expected || 'valid'} (got ${issue.received})`
  }
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`
}
