DROP TABLE payment_fences;
DROP INDEX payments_expiry;
DROP INDEX payments_fence;
DROP TABLE payments;
