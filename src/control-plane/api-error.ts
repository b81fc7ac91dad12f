// The API's error vocabulary lives in src/errors.ts (one registry for every plane); this keeps the
// control plane's import path short and stable.
export { ApiError, apiErrorResponse, ERRORS, ERRORS as ERROR_CODES, type ErrorCode } from '../errors.ts'
