// express 5 ships no types and @types/express is not a dependency: the bench's one Express app (the x402
// reference target) needs only its default export, typed at the call sites.
declare module 'express'
