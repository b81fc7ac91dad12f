// Runs a valibot schema on a request body or query and turns the first issue into a 400 naming the field.
import * as v from 'valibot'
import { ApiError } from './api-error.ts'

export function parseBody<S extends v.GenericSchema>(schema: S, input: unknown): v.InferOutput<S> {
  if (input === undefined) throw new ApiError('invalid_body', 'a JSON object body is required')
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new ApiError('invalid_body', 'the body must be a JSON object')
  }
  const result = v.safeParse(schema, input, { abortEarly: true })
  if (result.success) return result.output
  const issue = result.issues[0]
  const param = issue.path?.map((p) => String(p.key)).join('.')
  if (issue.kind === 'schema' && issue.type === 'strict_object' && issue.path) {
    throw new ApiError('invalid_parameter', `unknown field ${param}`, param)
  }
  if (!param) throw new ApiError('invalid_body', issue.message)
  throw new ApiError('invalid_parameter', `${param}: ${issue.message}`, param)
}
