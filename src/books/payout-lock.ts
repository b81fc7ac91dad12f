// The advisory lock under which payouts are recorded. A refund takes it too, so a payout batch cannot pay a
// merchant's balance out between a refund's check of that balance and its debit.

/** Arbitrary but fixed, distinct from the leader and migration locks. */
export const PAYOUT_RECORD_LOCK = 7_301_006
