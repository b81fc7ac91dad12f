-- x402 exact: each endpoint chooses when its authorizations are settled (null: the process default,
-- settlement.before_answer.enabled), and a settled call's receipt shows where its authorization went: the
-- transaction's block, and the authorization's place in a batched transaction (index among count).
ALTER TABLE endpoints ADD COLUMN x402_settlement text
  CHECK (x402_settlement IN ('before_answer', 'after'));
-- Set with settlement_tx (recordSettlementTx) and cleared with it (forgetSettlementTx): the index of the
-- authorization in the transaction that carries it, and how many it carries (1: transferWithAuthorization alone).
ALTER TABLE claims ADD COLUMN settlement_index integer CHECK (settlement_index >= 0);
ALTER TABLE claims ADD COLUMN settlement_count integer CHECK (settlement_count >= 1);
-- The block that mined the settlement, set when the claim is marked settled from that transaction's receipt
-- (null when it was found used on chain by another way, or settled before this column existed).
ALTER TABLE claims ADD COLUMN settlement_block bigint CHECK (settlement_block >= 0);
