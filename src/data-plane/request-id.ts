// Request ids live in the leaf src/request-id.ts (the admin port and the control plane use them too).
export { MAX_REQUEST_ID_LENGTH, nextRequestId, requestIdFrom } from '../request-id.ts'
