DROP TABLE task_feed_head;
DROP TABLE task_feed;
