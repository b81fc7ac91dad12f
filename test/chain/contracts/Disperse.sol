// SPDX-License-Identifier: MIT
// Batched ERC-20 payouts in one transaction: the sender approves this contract once, then each call moves
// tokens from the sender straight to every recipient (no balance ever rests here).
pragma solidity ^0.8.24;

interface IERC20 {
  function transferFrom(address from, address to, uint256 value) external returns (bool);
}

contract Disperse {
  function disperseToken(IERC20 token, address[] calldata recipients, uint256[] calldata values) external {
    require(recipients.length == values.length, 'Disperse: length mismatch');
    for (uint256 i = 0; i < recipients.length; i++) {
      // All or nothing: one failed leg reverts the whole batch, so a payout is never half sent.
      require(token.transferFrom(msg.sender, recipients[i], values[i]), 'Disperse: transfer failed');
    }
  }
}
