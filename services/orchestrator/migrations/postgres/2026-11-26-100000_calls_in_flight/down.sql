DROP TABLE calls_in_flight;
